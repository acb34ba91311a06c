#include "train/device_probe.h"

#include <cstdio>

#include <torch/cuda.h>
#include <unistd.h>

#ifdef T5SCALE_WITH_NCCL
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "core/units.h"

namespace t5scale {

void synchronize_device(c10::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

std::string cuda_device_name(c10::Device device) {
#ifdef T5SCALE_WITH_NCCL
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.index())->name;
#endif
  return "";
}

bool cuda_device_has_bf16(c10::Device device) {
#ifdef T5SCALE_WITH_NCCL
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.index())->major >= 8;
#endif
  return false;
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

#ifdef T5SCALE_WITH_NCCL
namespace {
// The caching allocator's per-device state exists only after CUDA's lazy initialisation (the first CUDA tensor
// does it); before that its statistics calls refuse the device ("Invalid device argument").
void initialise_cuda() { at::globalContext().lazyInitDevice(at::kCUDA); }
}  // namespace
#endif

std::optional<CudaAllocatorStats> cuda_allocator_stats(c10::Device device) {
#ifdef T5SCALE_WITH_NCCL
  if (device.is_cuda()) {
    initialise_cuda();
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
  if (device.is_cuda()) {
    initialise_cuda();
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
  }
#endif
}

bool is_out_of_memory(const c10::Error& error) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&error) != nullptr) return true;
  const std::string text = error.what_without_backtrace();
  return text.find("not enough memory") != std::string::npos || text.find("out of memory") != std::string::npos;
}

std::string memory_figures(c10::Device device) {
  auto gib = [](int64_t bytes) { return gib_text(static_cast<double>(bytes)); };
  std::string figures = device.str() + " holds " + gib(device_memory_bytes(device));
  if (const auto stats = cuda_allocator_stats(device)) {
    figures += "; allocated " + gib(stats->allocated_bytes) + ", reserved " + gib(stats->reserved_bytes) +
               ", peak allocated " + gib(stats->peak_allocated_bytes);
  }
  return figures;
}

}  // namespace t5scale
