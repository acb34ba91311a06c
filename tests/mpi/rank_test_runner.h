// The main of the multi-rank test binaries (run under mpirun with 1, 2 or 4 ranks). Rank 0 prints gtest's usual
// output; other ranks print only their failures, prefixed with their rank. Every rank returns its own result,
// so mpirun fails when any rank does.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>

#include "dist/mpi_runtime.h"

namespace t5scale::testing {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (result.failed()) {
      std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                   result.line_number(), result.summary());
    }
  }

 private:
  int rank_;
};

// Initialises MPI, runs `before_tests` on every rank, then every test; MPI is finalised on return.
inline int run_tests_on_every_rank(int argc, char** argv, const std::function<void()>& before_tests = {}) {
  MpiRuntime mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (before_tests) before_tests();
  if (mpi.world_rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(mpi.world_rank()));
  }
  return RUN_ALL_TESTS();
}

}  // namespace t5scale::testing
