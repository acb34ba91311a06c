// What a CUDA device says about itself, read in one place for the run record and the step benchmark: its name,
// its memory, and the caching allocator's counters (through the process's CUDA backend, dist/cuda_backend.h). Off
// CUDA there is nothing to read: the name is empty, the memory 0 and the counters absent.
#pragma once

#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <optional>
#include <string>

#include "dist/cuda_backend.h"

namespace t5scale {

// Waits for the device's queued work (nothing on the CPU), so that a host clock brackets the device's work.
void synchronize_device(c10::Device device);

std::string cuda_device_name(c10::Device device);          // "NVIDIA H100 80GB HBM3"; "" off CUDA
int64_t cuda_device_memory_bytes(c10::Device device);      // the device's total memory; 0 off CUDA
bool cuda_device_has_bf16(c10::Device device);             // compute capability 8.0 or newer; false off CUDA
// What a device can hold: a GPU's memory (0 when this build cannot read it), or the host's physical memory.
int64_t device_memory_bytes(c10::Device device);

std::optional<CudaAllocatorStats> cuda_allocator_stats(c10::Device device);
void reset_cuda_peak_stats(c10::Device device);  // nothing off CUDA

// Whether a LibTorch error is an allocation that failed: CUDA's OutOfMemoryError, or the CPU allocator's "not
// enough memory".
bool is_out_of_memory(const c10::Error& error);
// The memory figures of `device` for a report of an allocation that failed: the caching allocator's allocated,
// reserved and peak bytes and the device's total on CUDA; the device's (host's) total on the CPU.
std::string memory_figures(c10::Device device);

}  // namespace t5scale
