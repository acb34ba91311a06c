// The NCCL communicator on one rank: every collective in fp32, bf16 and fp16; collectives ordered after the compute
// stream's work and before what follows on it, with the host free meanwhile; async work ordering whichever stream
// waits for it. The watchdog's abort of a stalled collective is a probe run by ctest (tests/gpu/CMakeLists.txt),
// since it ends the process.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "core/check.h"
#include "dist/cuda_backend.h"
#include "gpu/gpu_test_support.h"
#include "support/base_test_support.h"

namespace t5scale {
namespace {

using testing::gpu_grid;
using testing::keep_current_stream_busy;
using Clock = std::chrono::steady_clock;

// Long enough that the host's launches, a few milliseconds, are over well before the GPU gets past the spin.
constexpr double kSpinS = 1.0;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

torch::TensorOptions on_gpu(torch::ScalarType dtype) {
  return torch::TensorOptions().dtype(dtype).device(gpu_grid().device());
}

TEST(NcclCommunicator, OneRankCollectivesInEveryDtype) {
  Communicator& world = *gpu_grid().world;
  ASSERT_EQ(world.size(), 1);
  // One rank: each sum has a single term and each gather one part, so every result is bit-exact.
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kHalf}) {
    SCOPED_TRACE(c10::toString(dtype));
    const torch::Tensor x = torch::randn({10, 100}, on_gpu(dtype));
    torch::Tensor t = x.clone();
    world.all_reduce_sum(t);
    EXPECT_TRUE(torch::equal(t, x)) << "all_reduce_sum";
    t = x.clone();
    world.all_reduce_max(t);
    EXPECT_TRUE(torch::equal(t, x)) << "all_reduce_max";
    const torch::Tensor gathered = world.all_gather(x);
    EXPECT_EQ(gathered.sizes(), torch::IntArrayRef({1, 10, 100}));
    EXPECT_TRUE(torch::equal(gathered, x.unsqueeze(0))) << "all_gather";
    EXPECT_TRUE(torch::equal(world.reduce_scatter_sum(x.view({-1})), x.view({-1}))) << "reduce_scatter_sum";
    t = x.clone();
    world.broadcast(t, 0);
    EXPECT_TRUE(torch::equal(t, x)) << "broadcast";
    t = x.clone();
    world.all_reduce_sum_async(t)->wait();
    EXPECT_TRUE(torch::equal(t, x)) << "all_reduce_sum_async";
    torch::Tensor chunk = torch::empty({x.numel()}, x.options());
    world.reduce_scatter_sum_async(x.view({-1}), chunk)->wait();
    EXPECT_TRUE(torch::equal(chunk, x.view({-1}))) << "reduce_scatter_sum_async";
  }
}

TEST(NcclCommunicator, TensorsOnTheWrongDeviceAreRefusedWithTheOperation) {
  torch::Tensor on_cpu = torch::ones({4});
  const std::string message = testing::error_of([&] { gpu_grid().world->all_reduce_sum(on_cpu); });
  EXPECT_NE(message.find("ncclAllReduce(sum) on the world group: the NCCL backend takes tensors on CUDA device"),
            std::string::npos)
      << message;
}

TEST(NcclCommunicator, CollectivesFollowTheComputeStreamAndLeaveTheHostFree) {
  Communicator& world = *gpu_grid().world;
  const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream();
  const int64_t n = 1 << 20;
  torch::Tensor x = torch::zeros({n}, on_gpu(torch::kFloat32));
  // The same calls once beforehand, so that the timed calls find their memory in the allocator's cache (a fresh
  // cudaMalloc may synchronise the device) and their kernels loaded: CUDA loads a kernel's module at its first
  // launch, and that load waits for the device (seen on an H200: the first `gathered * 2` waited out the spin).
  {
    torch::Tensor warm = x.clone();
    world.all_reduce_sum(warm);
    const torch::Tensor warm_doubled = world.all_gather(x) * 2;
    world.reduce_scatter_sum(x);
    x.fill_(1.0);
    x.zero_();  // zeros again: a collective that does not wait for the fill below must see them
    torch::cuda::synchronize();
  }

  keep_current_stream_busy(kSpinS);
  x.fill_(3.0);  // runs after the spin: a collective that did not wait for the compute stream would see zeros
  // Each call's host time, so that a failure names the call that waited.
  std::string host_times;
  const auto start = Clock::now();
  auto lap = [&, last = start](const char* call) mutable {
    host_times += msg(host_times.empty() ? "" : ", ", call, " ", seconds_since(last), " s");
    last = Clock::now();
  };
  const torch::Tensor gathered = world.all_gather(x);  // (1, n)
  lap("all_gather");
  const torch::Tensor scattered = world.reduce_scatter_sum(x);
  lap("reduce_scatter_sum");
  torch::Tensor reduced = x.clone();
  lap("clone");
  world.all_reduce_sum(reduced);
  lap("all_reduce_sum");
  const torch::Tensor doubled = gathered * 2;  // on the compute stream: must wait for the gather
  lap("multiply");
  const double host_s = seconds_since(start);
  EXPECT_FALSE(compute.query()) << "the compute stream had finished its spin when the collectives returned: they "
                                   "waited for the GPU on the host (" << host_times << ")";
  EXPECT_LT(host_s, 0.5 * kSpinS) << "launching three collectives took " << host_s << " s of host time ("
                                  << host_times << ")";

  const torch::Tensor threes = torch::full({n}, 3.0);
  EXPECT_TRUE(torch::equal(gathered.cpu().view({-1}), threes)) << "all_gather ran before the compute stream's fill";
  EXPECT_TRUE(torch::equal(scattered.cpu(), threes)) << "reduce_scatter ran before the compute stream's fill";
  EXPECT_TRUE(torch::equal(reduced.cpu(), threes)) << "all_reduce";
  EXPECT_TRUE(torch::equal(doubled.cpu().view({-1}), 2 * threes)) << "the compute stream read the gather too early";
}

TEST(NcclCommunicator, AsyncWorkOrdersTheStreamThatWaitsForIt) {
  Communicator& world = *gpu_grid().world;
  const int64_t n = 1 << 20;
  torch::Tensor flat = torch::zeros({n}, on_gpu(torch::kFloat32));
  torch::Tensor chunk = torch::empty({n}, flat.options());
  torch::Tensor sink = torch::empty({n}, flat.options());
  torch::cuda::synchronize();

  keep_current_stream_busy(kSpinS);
  flat.fill_(5.0);
  auto work = world.reduce_scatter_sum_async(flat, chunk);
  // Another stream waits for the work and reads its result; the compute stream is still spinning.
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, gpu_grid().device().index());
  {
    const c10::cuda::CUDAStreamGuard on_side(side);
    work->wait();
    sink.copy_(chunk);
    // sink and chunk were allocated on the compute stream: keep them until the side stream is done with them.
    sink.record_stream(side);
    chunk.record_stream(side);
  }
  EXPECT_FALSE(c10::cuda::getCurrentCUDAStream().query()) << "the async launch or wait() blocked the host";
  side.synchronize();
  EXPECT_TRUE(torch::equal(sink.cpu(), torch::full({n}, 5.0))) << "the side stream read the result too early";
}

// Run by ctest only (tests/gpu/CMakeLists.txt): the process must end with the watchdog's message within seconds.
TEST(NcclWatchdogProbe, DISABLED_StalledCollectiveAbortsTheJob) {
  MPI_Comm copy;
  ASSERT_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &copy), MPI_SUCCESS);
  const CommunicatorPtr probe =
      required_cuda_backend("the probe").nccl_communicator(copy, "probe", gpu_grid().cuda_device, /*timeout_s=*/1.0);
  torch::Tensor x = torch::ones({1024}, on_gpu(torch::kFloat32));
  // The collective waits behind 30 s of compute (T5SCALE_TEST_STALL_S: scripts/gpu-check.sh --quick gives 3, so that
  // a device whose context waits out the spin at exit costs seconds): pending for longer than its 1 s timeout, as if
  // a peer had stalled.
  const char* stall = std::getenv("T5SCALE_TEST_STALL_S");
  keep_current_stream_busy(stall != nullptr ? std::max(2.0, std::atof(stall)) : 30.0);
  probe->all_reduce_sum(x);
  x.cpu();  // the host waits here; the watchdog must end the process first
  FAIL() << "the stalled collective was not aborted";
}

}  // namespace
}  // namespace t5scale
