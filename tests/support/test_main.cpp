// The test binary's entry point: fixed seeds, deterministic CPU threads.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/end_process.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  torch::manual_seed(0);
  t5scale::end_process(RUN_ALL_TESTS());
}
