// How a rank finds its GPU and its backend, on any machine: the device index from the node-local rank, the check
// that no two ranks of a node share a GPU, the node-local rank itself under mpirun (every rank of these tests is
// on one node), and parallel.backend's resolution, auto's refusal on a GPU node LibTorch cannot use included.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>

#include "dist/process_grid.h"
#include "mpi/mpi_test_support.h"
#include "support/base_test_support.h"

namespace t5scale {
namespace {

using testing::error_of;
using Backend = ParallelSettings::Backend;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Sets an environment variable for the life of the object and restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(DevicePlacement, EachRankOfANodeDrivesTheGpuOfItsLocalRank) {
  for (int local = 0; local < 4; ++local) {
    EXPECT_EQ(cuda_device_index(local, 4, 4), local);
    EXPECT_EQ(cuda_device_index(local, 4, 8), local);  // a half-used node: the first four GPUs
  }
  EXPECT_EQ(cuda_device_index(0, 1, 1), 0);
}

TEST(DevicePlacement, OneVisibleGpuPerRankIsDeviceZero) {
  // srun --gpus-per-task=1: each rank sees only its own GPU; check_one_rank_per_gpu tells this from sharing.
  for (int local = 0; local < 4; ++local) EXPECT_EQ(cuda_device_index(local, 4, 1), 0);
}

TEST(DevicePlacement, MoreRanksThanGpusAreRefusedWithTheNumbers) {
  const ScopedEnv visible("CUDA_VISIBLE_DEVICES", "0,1,2,3");
  const std::string message = error_of([] { cuda_device_index(5, 8, 4); });
  EXPECT_TRUE(contains(message, "this node runs 8 ranks but only 4 CUDA devices are visible "
                                "(CUDA_VISIBLE_DEVICES=0,1,2,3)")) << message;
  EXPECT_TRUE(contains(message, "start at most 4 ranks per node")) << message;
  const std::string none = error_of([] { cuda_device_index(0, 2, 0); });
  EXPECT_TRUE(contains(none, "the NCCL backend needs a CUDA device, and none is visible")) << none;
}

TEST(DevicePlacement, TwoRanksOnOneGpuAreRefused) {
  EXPECT_NO_THROW(check_one_rank_per_gpu({"0000:1B:00.0", "0000:3B:00.0", "0000:5B:00.0"}));
  EXPECT_NO_THROW(check_one_rank_per_gpu({"0000:1B:00.0"}));
  const std::string message = error_of([] { check_one_rank_per_gpu({"0000:1B:00.0", "0000:3B:00.0", "0000:1B:00.0"}); });
  EXPECT_TRUE(contains(message, "node-local ranks 0 and 2 would both drive the GPU at PCI bus id 0000:1B:00.0"))
      << message;
}

TEST(DevicePlacement, NodeLocalRankUnderMpirun) {
  // Every rank of these tests runs on this one machine: the node-local rank is the world rank.
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const NodeGroup node;
  EXPECT_EQ(node.local_rank(), world_rank);
  EXPECT_EQ(node.local_size(), testing::world_size());
  // Strings of different lengths, in local rank order.
  const std::vector<std::string> all = node.all_gather("rank" + std::string(world_rank, '+'));
  ASSERT_EQ(static_cast<int>(all.size()), testing::world_size());
  for (int r = 0; r < testing::world_size(); ++r) EXPECT_EQ(all[r], "rank" + std::string(r, '+'));
}

TEST(BackendChoice, ExplicitBackendsAndAutoWhereThingsAreClear) {
  EXPECT_EQ(resolve_backend(Backend::kMpi, true, "", ""), CommBackend::kMpi);
  EXPECT_EQ(resolve_backend(Backend::kMpi, false, "/dev/nvidia0 exists", "CUDA sees no device"), CommBackend::kMpi);
  EXPECT_EQ(resolve_backend(Backend::kNccl, true, "", ""), CommBackend::kNccl);
  EXPECT_EQ(resolve_backend(Backend::kAuto, true, "", ""), CommBackend::kNccl);
  EXPECT_EQ(resolve_backend(Backend::kAuto, false, "", "this build's LibTorch has no CUDA"), CommBackend::kMpi);
  const std::string nccl = error_of([] { resolve_backend(Backend::kNccl, false, "", "CUDA sees no device"); });
  EXPECT_TRUE(contains(nccl, "parallel.backend: nccl needs a GPU that LibTorch can use")) << nccl;
  EXPECT_TRUE(contains(nccl, "CUDA sees no device")) << nccl;
}

TEST(BackendChoice, AutoRefusesAGpuNodeWhoseGpusLibTorchCannotUse) {
  const std::string message = error_of([] {
    resolve_backend(Backend::kAuto, false, "/dev/nvidia0 exists; CUDA_VISIBLE_DEVICES=0",
                    "cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version");
  });
  EXPECT_TRUE(contains(message, "parallel.backend: auto: this node has NVIDIA GPUs (/dev/nvidia0 exists; "
                                "CUDA_VISIBLE_DEVICES=0) but LibTorch cannot use them (cudaGetDeviceCount: CUDA "
                                "driver version is insufficient")) << message;
  EXPECT_TRUE(contains(message, "set parallel.backend: mpi (--set parallel.backend=mpi) to train on the CPU"))
      << message;
}

TEST(BackendChoice, VisibleDevicesCountAsASignOfAGpuNode) {
  {
    const ScopedEnv visible("CUDA_VISIBLE_DEVICES", "0,1");
    EXPECT_TRUE(contains(gpu_node_evidence(), "CUDA_VISIBLE_DEVICES=0,1")) << gpu_node_evidence();
  }
  for (const char* hidden : {"", "NoDevFiles", "-1"}) {
    const ScopedEnv visible("CUDA_VISIBLE_DEVICES", hidden);
    EXPECT_FALSE(contains(gpu_node_evidence(), "CUDA_VISIBLE_DEVICES")) << hidden << ": " << gpu_node_evidence();
  }
}

}  // namespace
}  // namespace t5scale
