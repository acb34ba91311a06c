// Entry point of the multi-rank tests of the parts without LibTorch (samplers, ...), run under mpirun with 1, 2
// and 4 ranks. Rank 0 prints gtest's usual output; other ranks print only their failures, prefixed with their
// rank. Every rank returns its own result, so mpirun fails when any rank does.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "dist/mpi_runtime.h"

namespace {

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

}  // namespace

int main(int argc, char** argv) {
  t5scale::MpiRuntime mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (mpi.world_rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(mpi.world_rank()));
  }
  return RUN_ALL_TESTS();
}
