#include "gpu/gpu_test_support.h"

#include <ATen/cuda/Sleep.h>
#include <cstdio>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>

#include "core/check.h"
#include "dist/cuda_backend.h"

namespace t5scale::testing {

namespace {
std::unique_ptr<ProcessGrid> grid;
}  // namespace

void GpuGridEnvironment::SetUp() {
  GridOptions options;
  options.backend = CommBackend::kNccl;
  options.collective_timeout_s = 300.0;  // a hung collective fails the test run with a message
  grid = std::make_unique<ProcessGrid>(ProcessGrid::create(options));
}

void GpuGridEnvironment::TearDown() { grid.reset(); }

ProcessGrid& gpu_grid() {
  T5S_CHECK(grid != nullptr, "the GPU grid is built by GpuGridEnvironment, which main() installs");
  return *grid;
}

void keep_current_stream_busy(double seconds) {
  int peak_khz = 0;
  const cudaError_t status = cudaDeviceGetAttribute(&peak_khz, cudaDevAttrClockRate, c10::cuda::current_device());
  T5S_CHECK(status == cudaSuccess && peak_khz > 0, "cudaDeviceGetAttribute(cudaDevAttrClockRate): ",
            cudaGetErrorString(status));
  // Cycles at the peak clock: at any lower clock the spin only lasts longer.
  at::cuda::sleep(static_cast<int64_t>(seconds * 1e3 * peak_khz));
}

bool cudnn_attention_available() {
  const std::string why_not = required_cuda_backend("the cuDNN attention tests").fused_attention_unavailable();
  if (!why_not.empty()) std::printf("cuDNN's fused attention is not available: %s\n", why_not.c_str());
  return why_not.empty();
}

}  // namespace t5scale::testing
