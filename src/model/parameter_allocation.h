// A parameter's storage, allocated with its name and shape at hand: an allocation that fails (a model too large
// for the host or the GPU) is reported as an error that names the tensor, its per-rank shape and its bytes, not as
// LibTorch's allocator message alone.
#pragma once

#include <torch/torch.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "core/check.h"
#include "core/units.h"

namespace t5scale {

inline torch::Tensor allocate_parameter(const std::string& what, const std::vector<int64_t>& shape,
                                        const torch::TensorOptions& options) {
  double bytes = static_cast<double>(c10::elementSize(c10::typeMetaToScalarType(options.dtype())));
  for (const int64_t d : shape) bytes *= static_cast<double>(d);
  const std::string dims = join(shape, ", ");
  auto failure = [&](const std::string& why) {
    return OutOfMemoryError(msg("cannot allocate ", what, " of shape (", dims, ") ", options.dtype().name(), " on ",
                                options.device().str(), " (", bytes_to_gib(bytes), " GiB): ", why));
  };
  // LibTorch's CPU allocator ends the process (a fatal enforce) when the host refuses an allocation, so a tensor
  // larger than the host's memory is refused here, where it can still be reported.
  const double host_bytes = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  if (options.device().is_cpu() && host_bytes > 0 && bytes > host_bytes) {
    throw failure(msg("more than this host's ", bytes_to_gib(host_bytes), " GiB of memory"));
  }
  try {
    return torch::empty(shape, options);
  } catch (const c10::Error& e) {
    throw failure(e.what_without_backtrace());
  }
}

}  // namespace t5scale
