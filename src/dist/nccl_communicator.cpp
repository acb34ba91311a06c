#include "dist/nccl_communicator.h"

#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <thread>

#include "dist/mpi_runtime.h"

namespace t5scale {

namespace {

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

class NcclWork final : public CollectiveWork {
 public:
  NcclWork(NcclCommunicator& comm, const char* operation, c10::cuda::CUDAStream comm_stream)
      : comm_(comm), operation_(operation) {
    done_.record(comm_stream);
  }
  ~NcclWork() override {
    if (!waited_) wait();
  }
  void wait() override {
    if (waited_) return;
    comm_.poll(done_, operation_);
    done_.block(c10::cuda::getCurrentCUDAStream());  // the compute stream continues after the collective
    waited_ = true;
  }

 private:
  NcclCommunicator& comm_;
  const char* operation_;
  at::cuda::CUDAEvent done_;
  bool waited_ = false;
};

}  // namespace

int local_cuda_device() {
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int local_rank = 0;
  MPI_CHECK(MPI_Comm_rank(node, &local_rank));
  MPI_Comm_free(&node);
  int devices = 0;
  T5S_CHECK(cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0, "[rank ", world_rank(),
            "] the NCCL backend needs a CUDA device, none is visible");
  return local_rank % devices;
}

NcclCommunicator::NcclCommunicator(MPI_Comm group, std::string name, int device, double timeout_s)
    : group_(group),
      name_(std::move(name)),
      device_(device < 0 ? local_cuda_device() : device),
      timeout_s_(timeout_s),
      stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, static_cast<c10::DeviceIndex>(device_))) {
  MPI_CHECK(MPI_Comm_rank(group_, &rank_));
  MPI_CHECK(MPI_Comm_size(group_, &size_));
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  ncclUniqueId id;
  if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, group_));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // initialisation returns at once and is polled, so a missing peer cannot hang the job
  check(ncclCommInitRankConfig(&comm_, size_, id, rank_, &config), "ncclCommInitRankConfig");
  wait_while_in_progress("ncclCommInitRankConfig");
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr) ncclCommDestroy(comm_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && group_ != MPI_COMM_NULL) MPI_Comm_free(&group_);
}

void NcclCommunicator::fail(const std::string& what) {
  if (comm_ != nullptr) ncclCommAbort(comm_);  // unblocks kernels waiting on peers
  comm_ = nullptr;
  abort_job("t5scale", msg(what, " [", name_, " group, rank ", rank_, " of ", size_, ", CUDA device ", device_, "]"));
}

void NcclCommunicator::check(ncclResult_t result, const char* operation) {
  if (result == ncclSuccess || result == ncclInProgress) return;
  fail(msg(operation, " failed: ", ncclGetErrorString(result), " (", ncclGetLastError(comm_), ")"));
}

void NcclCommunicator::wait_while_in_progress(const char* operation) {
  const auto start = std::chrono::steady_clock::now();
  ncclResult_t state = ncclInProgress;
  while (true) {
    if (comm_ != nullptr) check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
    if (state != ncclInProgress) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_s_) {
      fail(msg(operation, " timed out after ", timeout_s_, " s: a peer rank has stalled or died"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (state != ncclSuccess) fail(msg(operation, " failed: ", ncclGetErrorString(state)));
}

void NcclCommunicator::poll(const at::cuda::CUDAEvent& done, const char* operation) {
  const auto start = std::chrono::steady_clock::now();
  for (int polls = 0; !done.query(); ++polls) {
    ncclResult_t state = ncclSuccess;
    check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
    if (state != ncclSuccess && state != ncclInProgress) fail(msg(operation, " failed: ", ncclGetErrorString(state)));
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_s_) {
      fail(msg(operation, " timed out after ", timeout_s_, " s: a peer rank has stalled or died"));
    }
    if (polls > 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

std::unique_ptr<CollectiveWork> NcclCommunicator::enqueue(const char* operation,
                                                          const std::vector<torch::Tensor>& tensors,
                                                          const Launch& launch) {
  for (const auto& t : tensors) {
    T5S_CHECK(t.is_cuda() && t.get_device() == device_, operation, " on the ", name_, " group: the NCCL backend "
              "takes tensors on CUDA device ", device_, ", got ", t.device());
    T5S_CHECK(t.is_contiguous(), operation, " on the ", name_, " group: the tensor must be contiguous");
  }
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  // The communication stream starts once the compute stream has produced the inputs.
  at::cuda::CUDAEvent inputs_ready;
  inputs_ready.record(c10::cuda::getCurrentCUDAStream());
  inputs_ready.block(stream_);
  // The caching allocator must not hand these buffers out again before the collective has finished with them.
  for (const auto& t : tensors) c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
  check(launch(stream_.stream()), operation);
  wait_while_in_progress(operation);
  return std::make_unique<NcclWork>(*this, operation, stream_);
}

std::unique_ptr<CollectiveWork> NcclCommunicator::all_reduce_sum_async(torch::Tensor& tensor) {
  return enqueue("ncclAllReduce(sum)", {tensor}, [&](cudaStream_t s) {
    return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_type(tensor.scalar_type()),
                         ncclSum, comm_, s);
  });
}

void NcclCommunicator::all_reduce_sum(torch::Tensor& tensor) { all_reduce_sum_async(tensor)->wait(); }

void NcclCommunicator::all_reduce_max(torch::Tensor& tensor) {
  enqueue("ncclAllReduce(max)", {tensor}, [&](cudaStream_t s) {
    return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_type(tensor.scalar_type()),
                         ncclMax, comm_, s);
  })->wait();
}

torch::Tensor NcclCommunicator::all_gather(const torch::Tensor& tensor) {
  const torch::Tensor input = tensor.contiguous();
  std::vector<int64_t> shape = {size_};
  for (auto d : input.sizes()) shape.push_back(d);
  torch::Tensor output = torch::empty(shape, input.options());
  enqueue("ncclAllGather", {input, output}, [&](cudaStream_t s) {
    return ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(), nccl_type(input.scalar_type()), comm_, s);
  })->wait();
  return output;
}

void NcclCommunicator::broadcast(torch::Tensor& tensor, int root) {
  enqueue("ncclBroadcast", {tensor}, [&](cudaStream_t s) {
    return ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_type(tensor.scalar_type()), root,
                         comm_, s);
  })->wait();
}

std::unique_ptr<CollectiveWork> NcclCommunicator::reduce_scatter_sum_async(const torch::Tensor& flat,
                                                                           torch::Tensor& chunk) {
  T5S_CHECK(flat.numel() == chunk.numel() * size_, "reduce_scatter on the ", name_, " group: ", flat.numel(),
            " elements do not split into ", size_, " chunks of ", chunk.numel());
  return enqueue("ncclReduceScatter(sum)", {flat, chunk}, [&](cudaStream_t s) {
    return ncclReduceScatter(flat.data_ptr(), chunk.data_ptr(), chunk.numel(), nccl_type(flat.scalar_type()), ncclSum,
                             comm_, s);
  });
}

torch::Tensor NcclCommunicator::reduce_scatter_sum(const torch::Tensor& flat) {
  torch::Tensor chunk = torch::empty({flat.numel() / size_}, flat.options());
  reduce_scatter_sum_async(flat.contiguous(), chunk)->wait();
  return chunk;
}

}  // namespace t5scale
