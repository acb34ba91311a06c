#include "train/device_probe.h"

#include <cstdio>

#include <torch/cuda.h>
#include <unistd.h>

#include "core/units.h"

namespace t5scale {

void synchronize_device(c10::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

namespace {
CudaDeviceFacts facts_of(c10::Device device) {
  return required_cuda_backend("a CUDA device").device_facts(device.index());
}
}  // namespace

std::string cuda_device_name(c10::Device device) { return device.is_cuda() ? facts_of(device).name : ""; }

bool cuda_device_has_bf16(c10::Device device) {
  return device.is_cuda() && facts_of(device).compute_capability_major >= 8;
}

int64_t cuda_device_memory_bytes(c10::Device device) { return device.is_cuda() ? facts_of(device).memory_bytes : 0; }

int64_t device_memory_bytes(c10::Device device) {
  if (device.is_cuda()) return cuda_device_memory_bytes(device);
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

std::optional<CudaAllocatorStats> cuda_allocator_stats(c10::Device device) {
  if (!device.is_cuda()) return std::nullopt;
  return required_cuda_backend("the CUDA allocator's counters").allocator_stats(device.index());
}

void reset_cuda_peak_stats(c10::Device device) {
  if (device.is_cuda()) {
    required_cuda_backend("the CUDA allocator's counters").reset_peak_allocator_stats(device.index());
  }
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
