// Entry point of the multi-rank tests on LibTorch (see rank_test_runner.h).
#include <torch/torch.h>

#include "core/end_process.h"
#include "mpi/rank_test_runner.h"

int main(int argc, char** argv) {
  t5scale::end_process(t5scale::testing::run_tests_on_every_rank(argc, argv, [] {
    torch::set_num_threads(1);  // ranks share the machine's cores
  }));
}
