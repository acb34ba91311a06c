// Entry point of the multi-rank tests of the parts without LibTorch (samplers, ...); see rank_test_runner.h.
#include "mpi/rank_test_runner.h"

int main(int argc, char** argv) { return t5scale::testing::run_tests_on_every_rank(argc, argv); }
