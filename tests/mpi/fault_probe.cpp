// A job that fails on purpose, for the failure tests: every rank runs all-reduces over the world in a loop, and
// rank 1 either throws (mode "throw") or stops answering for a minute (mode "stall") at the third one. The whole
// job must end with a non-zero exit and a message naming the rank (for a stall: the rank that does not answer the
// liveness pings, with its host), not hang. In mode "refuse" every rank throws the same error before any
// collective, as every rank of a job refuses the same bad input: the job prints that line once and nothing else.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "dist/mpi_runtime.h"
#include "dist/process_grid.h"

int main(int argc, char** argv) {
  return t5scale::run_mpi_program(argc, argv, "t5scale_fault_probe", [](int argc_, char** argv_) {
    T5S_CHECK(argc_ == 2, "usage: t5scale_fault_probe throw|stall|refuse");
    const std::string mode = argv_[1];
    if (mode == "refuse") throw t5scale::Error("input.bin: refused by every rank");
    t5scale::GridOptions options;
    options.collective_timeout_s = 3.0;
    t5scale::ProcessGrid grid = t5scale::ProcessGrid::create(options);
    for (int i = 0; i < 6; ++i) {
      if (grid.world_rank() == 1 && i == 3) {
        if (mode == "throw") throw t5scale::Error("injected failure in step 3");
        if (mode == "stall") std::this_thread::sleep_for(std::chrono::seconds(60));
      }
      torch::Tensor x = torch::ones({4});
      grid.world->all_reduce_sum(x);
    }
    std::printf("rank %d finished: the fault was not injected\n", grid.world_rank());
    return 0;
  });
}
