// Shared by the GPU tests (t5scale_gpu_tests): the skip code, the one-rank NCCL grid every test uses, and the
// GPU-time helpers.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "dist/process_grid.h"

namespace t5scale::testing {

// ctest's SKIP_RETURN_CODE for every GPU test: the binary exits with it where LibTorch sees no CUDA device.
constexpr int kSkipReturnCode = 77;

// The grid of the whole run on the NCCL backend (one rank: TP = DP = 1), built once because NCCL's initialisation
// takes a while, and torn down before MPI is finalised. Building it chooses the rank's GPU and makes it current.
class GpuGridEnvironment : public ::testing::Environment {
 public:
  void SetUp() override;
  void TearDown() override;
};
ProcessGrid& gpu_grid();

// Keeps the current CUDA stream busy for at least `seconds` (a spinning kernel): work queued after it on the same
// stream starts only then.
void keep_current_stream_busy(double seconds);

// Whether the CUDA backend runs cuDNN's fused attention here (a build with cuDNN's frontend, a cuDNN it can use);
// prints why not when it does not.
bool cudnn_attention_available();

}  // namespace t5scale::testing
