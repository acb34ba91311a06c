#include "dist/nccl_communicator.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <cstdio>

#include "dist/mpi_runtime.h"

namespace t5scale {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

ncclDataType_t nccl_type(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32: return ncclFloat32;
    case torch::kFloat64: return ncclFloat64;
    case torch::kHalf: return ncclFloat16;
    case torch::kBFloat16: return ncclBfloat16;
    case torch::kInt64: return ncclInt64;
    case torch::kInt32: return ncclInt32;
    case torch::kUInt8:
    case torch::kBool: return ncclUint8;
    default: throw Error(msg("NCCL has no type for dtype ", dtype));
  }
}

// A launched collective: wait() orders the stream current at that moment after it, without blocking the host.
class NcclWork final : public CollectiveWork {
 public:
  NcclWork(std::shared_ptr<at::cuda::CUDAEvent> done, int device) : done_(std::move(done)), device_(device) {}
  ~NcclWork() override { wait(); }  // a dropped work object still keeps the result from being read too early
  void wait() override {
    if (waited_) return;
    order_current_stream();
    waited_ = true;
  }
  bool order_current_stream() override {
    done_->block(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_)));
    return true;
  }

 private:
  std::shared_ptr<at::cuda::CUDAEvent> done_;
  int device_;
  bool waited_ = false;
};

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm group, std::string name, int device, double timeout_s)
    : Communicator(rank_in(group), size_of(group), std::move(name)),
      group_(group),
      device_(device),
      timeout_s_(timeout_s),
      stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, static_cast<c10::DeviceIndex>(device))) {
  T5S_CHECK(device_ >= 0, "the ", name_, " group's NCCL communicator needs a CUDA device index, got ", device_);
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  ncclUniqueId id;
  if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, group_));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // initialisation returns at once and is polled, so a missing peer cannot hang the job
  check(ncclCommInitRankConfig(&comm_, size_, id, rank_, &config), "ncclCommInitRankConfig");
  wait_while_in_progress("ncclCommInitRankConfig");
  watchdog_ = std::thread([this] { watch(); });
}

NcclCommunicator::~NcclCommunicator() {
  // The collectives in flight finish under the watchdog's eye; then it stops, and the communicator goes.
  if (comm_ != nullptr) cudaStreamSynchronize(stream_.stream());
  {
    const std::lock_guard<std::mutex> lock(in_flight_mutex_);
    stopping_ = true;
  }
  in_flight_changed_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  if (comm_ != nullptr) ncclCommDestroy(comm_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && group_ != MPI_COMM_NULL) MPI_Comm_free(&group_);
}

void NcclCommunicator::fail(const std::string& what) {
  // The first failure, on any thread, reports and ends the job; a second one waits here for the end.
  static std::mutex failing;
  failing.lock();
  const std::string message =
      msg(what, " [", name_, " group, rank ", rank_, " of ", size_, ", CUDA device ", device_, "]");
  // Said before the abort, which can itself hang when the network is stuck.
  std::fprintf(stderr, "[rank %d] t5scale: %s: aborting the NCCL communicator\n", world_rank(), message.c_str());
  std::fflush(stderr);
  if (comm_ != nullptr) ncclCommAbort(comm_);  // frees kernels waiting on peers
  abort_job("t5scale", message);
}

void NcclCommunicator::check(ncclResult_t result, const char* operation) {
  if (result == ncclSuccess || result == ncclInProgress) return;
  fail(msg(operation, " failed: ", ncclGetErrorString(result), " (", ncclGetLastError(comm_), ")"));
}

void NcclCommunicator::wait_while_in_progress(const char* operation) {
  const auto start = Clock::now();
  ncclResult_t state = ncclInProgress;
  while (true) {
    if (comm_ != nullptr) check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
    if (state != ncclInProgress) break;
    if (seconds_since(start) > timeout_s_) {
      fail(msg(operation, " timed out after ", timeout_s_, " s: a peer rank has stalled or died"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (state != ncclSuccess) fail(msg(operation, " failed: ", ncclGetErrorString(state)));
}

void NcclCommunicator::watch() {
  // Event queries from this thread must go to this rank's GPU: a thread's current device starts as 0, and the
  // runtime would open a context on GPU 0 for it.
  try {
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(device_));
  } catch (const std::exception& e) {
    fail(msg("the watchdog of the ", name_, " group cannot use CUDA device ", device_, ": ", e.what()));
  }
  std::unique_lock<std::mutex> lock(in_flight_mutex_);
  while (true) {
    in_flight_changed_.wait(lock, [this] { return stopping_ || !in_flight_.empty(); });
    if (in_flight_.empty()) return;  // stopping, nothing left
    const InFlight oldest = in_flight_.front();
    lock.unlock();
    bool done = false;
    ncclResult_t state = ncclSuccess;
    ncclResult_t polled = ncclSuccess;
    try {
      done = oldest.done->query();
      polled = ncclCommGetAsyncError(comm_, &state);
    } catch (const std::exception& e) {  // a CUDA error (sticky, e.g. an illegal address) while following it
      fail(msg(oldest.operation, " failed: ", e.what()));
    }
    if (polled != ncclSuccess) fail(msg("ncclCommGetAsyncError failed: ", ncclGetErrorString(polled)));
    if (state != ncclSuccess && state != ncclInProgress) {
      fail(msg(oldest.operation, " failed: ", ncclGetErrorString(state), " (", ncclGetLastError(comm_), ")"));
    }
    if (!done && seconds_since(oldest.launched) > timeout_s_) {
      fail(msg(oldest.operation, " timed out after ", timeout_s_, " s: a peer rank has stalled or died"));
    }
    lock.lock();
    if (done) {
      in_flight_.pop_front();  // the next one may be done as well: look at once
    } else {
      // Completion is only bookkeeping here (nobody waits on this thread): a millisecond between looks is plenty.
      in_flight_changed_.wait_for(lock, std::chrono::milliseconds(1));
    }
  }
}

std::shared_ptr<at::cuda::CUDAEvent> NcclCommunicator::launch(const char* operation,
                                                              const std::vector<torch::Tensor>& tensors,
                                                              const Launch& call) {
  for (const auto& t : tensors) {
    T5S_CHECK(t.is_cuda() && t.get_device() == device_, operation, " on the ", name_, " group: the NCCL backend "
              "takes tensors on CUDA device ", device_, ", got ", t.device());
    T5S_CHECK(t.is_contiguous(), operation, " on the ", name_, " group: the tensor must be contiguous");
  }
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_));
  auto done = std::make_shared<at::cuda::CUDAEvent>();
  {
    const std::lock_guard<std::mutex> lock(launch_mutex_);
    // The collective starts once the compute stream has produced its inputs, with no host wait.
    at::cuda::CUDAEvent inputs_ready;
    inputs_ready.record(compute);
    inputs_ready.block(stream_);
    // The caching allocator must not hand these buffers out again before the collective has finished with them,
    // even when the caller drops its tensors right after the call.
    for (const auto& t : tensors) c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
    const ncclResult_t result = call(stream_.stream());
    check(result, operation);
    // A non-blocking communicator may still be enqueueing: the completion event must come after the kernel.
    if (result == ncclInProgress) wait_while_in_progress(operation);
    done->record(stream_);
  }
  {
    const std::lock_guard<std::mutex> lock(in_flight_mutex_);
    in_flight_.push_back({done, operation, Clock::now()});
  }
  in_flight_changed_.notify_one();
  return done;
}

std::unique_ptr<CollectiveWork> NcclCommunicator::all_reduce_sum_async(torch::Tensor& tensor) {
  return std::make_unique<NcclWork>(launch("ncclAllReduce(sum)", {tensor}, [&](cudaStream_t s) {
    return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_type(tensor.scalar_type()),
                         ncclSum, comm_, s);
  }), device_);
}

void NcclCommunicator::all_reduce_max(torch::Tensor& tensor) {
  NcclWork(launch("ncclAllReduce(max)", {tensor}, [&](cudaStream_t s) {
    return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_type(tensor.scalar_type()),
                         ncclMax, comm_, s);
  }), device_).wait();
}

torch::Tensor NcclCommunicator::all_gather(const torch::Tensor& tensor) {
  const torch::Tensor input = tensor.contiguous();
  std::vector<int64_t> shape = {size_};
  for (auto d : input.sizes()) shape.push_back(d);
  torch::Tensor output = torch::empty(shape, input.options());  // (size, *tensor.shape)
  NcclWork(launch("ncclAllGather", {input, output}, [&](cudaStream_t s) {
    return ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(), nccl_type(input.scalar_type()), comm_, s);
  }), device_).wait();
  return output;
}

void NcclCommunicator::broadcast(torch::Tensor& tensor, int root) {
  NcclWork(launch("ncclBroadcast", {tensor}, [&](cudaStream_t s) {
    return ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_type(tensor.scalar_type()), root,
                         comm_, s);
  }), device_).wait();
}

std::unique_ptr<CollectiveWork> NcclCommunicator::reduce_scatter_sum_async(const torch::Tensor& flat,
                                                                           torch::Tensor& chunk) {
  T5S_CHECK(flat.numel() == chunk.numel() * size_, "reduce_scatter on the ", name_, " group: ", flat.numel(),
            " elements do not split into ", size_, " chunks of ", chunk.numel());
  T5S_CHECK(flat.scalar_type() == chunk.scalar_type(), "reduce_scatter on the ", name_, " group: dtypes differ (",
            flat.scalar_type(), " and ", chunk.scalar_type(), ")");
  return std::make_unique<NcclWork>(launch("ncclReduceScatter(sum)", {flat, chunk}, [&](cudaStream_t s) {
    return ncclReduceScatter(flat.data_ptr(), chunk.data_ptr(), chunk.numel(), nccl_type(flat.scalar_type()), ncclSum,
                             comm_, s);
  }), device_);
}

}  // namespace t5scale
