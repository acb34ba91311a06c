// The main of the GPU tests. Without a CUDA device LibTorch can use it says why and exits with the skip code
// before any test is listed or run, so ctest reports every entry as skipped, never as passed.
#include <torch/torch.h>

#include <cstdio>

#include "core/end_process.h"
#include "dist/cuda_backend.h"
#include "gpu/gpu_test_support.h"
#include "mpi/rank_test_runner.h"

int main(int argc, char** argv) {
  std::string why_not;
  if (!t5scale::cuda_usable(&why_not)) {  // loads the CUDA backend where the driver is
    std::printf("skipped: LibTorch sees no usable CUDA device (%s)\n", why_not.c_str());
    t5scale::end_process(t5scale::testing::kSkipReturnCode);
  }
  t5scale::end_process(t5scale::testing::run_tests_on_every_rank(
      argc, argv, [] { ::testing::AddGlobalTestEnvironment(new t5scale::testing::GpuGridEnvironment); }));
}
