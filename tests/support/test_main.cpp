// The test binary's entry point: fixed seeds, deterministic CPU threads.
#include <gtest/gtest.h>
#include <torch/torch.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  torch::manual_seed(0);
  return RUN_ALL_TESTS();
}
