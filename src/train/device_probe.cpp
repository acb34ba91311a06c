#include "train/device_probe.h"

#include <unistd.h>

#ifdef T5SCALE_WITH_NCCL
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace t5scale {

std::string cuda_device_name(c10::Device device) {
#ifdef T5SCALE_WITH_NCCL
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.index())->name;
#endif
  return "";
}

int64_t cuda_device_memory_bytes(c10::Device device) {
#ifdef T5SCALE_WITH_NCCL
  if (device.is_cuda()) return static_cast<int64_t>(at::cuda::getDeviceProperties(device.index())->totalGlobalMem);
#endif
  return 0;
}

int64_t device_memory_bytes(c10::Device device) {
  if (device.is_cuda()) return cuda_device_memory_bytes(device);
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

std::optional<CudaAllocatorStats> cuda_allocator_stats(c10::Device device) {
#ifdef T5SCALE_WITH_NCCL
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    const auto aggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    return CudaAllocatorStats{stats.allocated_bytes[aggregate].current, stats.reserved_bytes[aggregate].current,
                              stats.allocated_bytes[aggregate].peak, stats.reserved_bytes[aggregate].peak};
  }
#endif
  return std::nullopt;
}

void reset_cuda_peak_stats(c10::Device device) {
#ifdef T5SCALE_WITH_NCCL
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#endif
}

}  // namespace t5scale
