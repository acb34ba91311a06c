// Entry point of the multi-rank tests of the data part (the samplers on several ranks); see rank_test_runner.h.
#include "core/end_process.h"
#include "mpi/rank_test_runner.h"

int main(int argc, char** argv) { t5scale::end_process(t5scale::testing::run_tests_on_every_rank(argc, argv)); }
