#include "dist/mpi_communicator.h"

#include <sched.h>

#include <chrono>
#include <thread>

#include "dist/mpi_runtime.h"
#include "dist/peer_liveness.h"

namespace t5scale {

namespace {

// How long a rank whose collective timed out waits for the others to answer its liveness ping.
constexpr double kLivenessProbeS = 5.0;
// How long a waiting rank polls with sched_yield before it backs off to sleeps.
constexpr double kYieldingWaitS = 2e-3;

// Element type for reductions; bf16 and fp16 have none in MPI and are staged through fp32 by the caller.
MPI_Datatype reduction_type(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32: return MPI_FLOAT;
    case torch::kFloat64: return MPI_DOUBLE;
    case torch::kInt64: return MPI_INT64_T;
    case torch::kInt32: return MPI_INT32_T;
    default: throw Error(msg("MPI reduction of dtype ", dtype, " is not supported"));
  }
}

bool needs_staging(torch::ScalarType dtype) { return dtype == torch::kBFloat16 || dtype == torch::kHalf; }

void check_cpu(const torch::Tensor& tensor, const char* operation, const std::string& group) {
  T5S_CHECK(tensor.device().is_cpu(), operation, " on the ", group, " group: the MPI backend takes CPU tensors, got ",
            tensor.device());
  T5S_CHECK(tensor.is_contiguous(), operation, " on the ", group, " group: the tensor must be contiguous");
}

// An MPI request plus what must happen when it completes: copy a staged fp32 result back, for one.
class MpiWork final : public CollectiveWork {
 public:
  MpiWork(const MpiCommunicator& comm, const char* operation, std::function<void()> on_done)
      : comm_(comm), operation_(operation), on_done_(std::move(on_done)) {}
  ~MpiWork() override {
    if (!waited_) wait();  // a request is never left in flight
  }
  void wait() override {
    if (waited_) return;
    comm_.wait(request, operation_);
    waited_ = true;
    if (on_done_) on_done_();
  }
  MPI_Request request = MPI_REQUEST_NULL;
  torch::Tensor keep_alive;  // the staging buffer or source while the request runs

 private:
  const MpiCommunicator& comm_;
  const char* operation_;
  std::function<void()> on_done_;
  bool waited_ = false;
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, double timeout_s)
    : Communicator(rank_in(comm), size_of(comm), std::move(name)), comm_(comm), timeout_s_(timeout_s) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL && comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
}

void MpiCommunicator::wait(MPI_Request& request, const char* operation) const {
  const auto start = std::chrono::steady_clock::now();
  int done = 0;
  for (int polls = 0;; ++polls) {
    MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    // Spin briefly for latency; then, for the first 2 ms, yield the core at each poll (a rank that shares it runs
    // at once, and a nonblocking collective, which moves on only while it is polled, is not left waiting out a
    // sleep's timer slack at each of its steps); then back off with sleeps. A rank that waits this long answers
    // the liveness pings of a rank whose own collective timed out.
    const double waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (polls > 64) {
      answer_liveness_pings();
      if (waited_s < kYieldingWaitS) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(polls > 2000 ? 500 : 20));
      }
    }
    if (waited_s > timeout_s_) {
      abort_job("t5scale", msg(operation, " on the ", name_, " group (rank ", rank_, " of ", size_,
                               ") timed out after ", timeout_s_, " s; ",
                               describe_unresponsive(unresponsive_ranks(kLivenessProbeS))));
    }
  }
}

std::unique_ptr<CollectiveWork> MpiCommunicator::all_reduce_async(torch::Tensor& tensor, MPI_Op op,
                                                                  const char* operation) {
  check_cpu(tensor, operation, name_);
  if (size_ == 1) return std::make_unique<CompletedWork>();  // the sum of one rank: no staging, no call
  if (needs_staging(tensor.scalar_type())) {
    torch::Tensor staged = tensor.to(torch::kFloat32);
    auto work = std::make_unique<MpiWork>(*this, operation, [tensor, staged]() mutable { tensor.copy_(staged); });
    work->keep_alive = staged;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, staged.data_ptr(), static_cast<int>(staged.numel()), MPI_FLOAT, op, comm_,
                             &work->request));
    return work;
  }
  auto work = std::make_unique<MpiWork>(*this, operation, nullptr);
  work->keep_alive = tensor;
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, tensor.data_ptr(), static_cast<int>(tensor.numel()),
                           reduction_type(tensor.scalar_type()), op, comm_, &work->request));
  return work;
}

std::unique_ptr<CollectiveWork> MpiCommunicator::all_reduce_sum_async(torch::Tensor& tensor) {
  return all_reduce_async(tensor, MPI_SUM, "all_reduce(sum)");
}

void MpiCommunicator::all_reduce_max(torch::Tensor& tensor) {
  all_reduce_async(tensor, MPI_MAX, "all_reduce(max)")->wait();
}

torch::Tensor MpiCommunicator::all_gather(const torch::Tensor& tensor) {
  const torch::Tensor input = tensor.contiguous();
  check_cpu(input, "all_gather", name_);
  std::vector<int64_t> shape = {size_};
  for (auto d : input.sizes()) shape.push_back(d);
  torch::Tensor output = torch::empty(shape, input.options());
  MpiWork work(*this, "all_gather", nullptr);
  MPI_CHECK(MPI_Iallgather(input.data_ptr(), static_cast<int>(input.nbytes()), MPI_BYTE, output.data_ptr(),
                           static_cast<int>(input.nbytes()), MPI_BYTE, comm_, &work.request));
  work.wait();
  return output;
}

void MpiCommunicator::broadcast(torch::Tensor& tensor, int root) {
  check_cpu(tensor, "broadcast", name_);
  MpiWork work(*this, "broadcast", nullptr);
  MPI_CHECK(MPI_Ibcast(tensor.data_ptr(), static_cast<int>(tensor.nbytes()), MPI_BYTE, root, comm_, &work.request));
  work.wait();
}

std::unique_ptr<CollectiveWork> MpiCommunicator::reduce_scatter_sum_async(const torch::Tensor& flat,
                                                                          torch::Tensor& chunk) {
  check_cpu(flat, "reduce_scatter(sum)", name_);
  check_cpu(chunk, "reduce_scatter(sum)", name_);
  T5S_CHECK(flat.numel() == chunk.numel() * size_, "reduce_scatter on the ", name_, " group: ", flat.numel(),
            " elements do not split into ", size_, " chunks of ", chunk.numel());
  T5S_CHECK(flat.scalar_type() == chunk.scalar_type(), "reduce_scatter: dtypes differ");
  if (needs_staging(flat.scalar_type())) {
    torch::Tensor staged_in = flat.to(torch::kFloat32);
    torch::Tensor staged_out = torch::empty({chunk.numel()}, staged_in.options());
    auto work = std::make_unique<MpiWork>(*this, "reduce_scatter(sum)",
                                          [chunk, staged_out]() mutable { chunk.view({-1}).copy_(staged_out); });
    work->keep_alive = staged_in;  // staged_out lives in the completion callback
    MPI_CHECK(MPI_Ireduce_scatter_block(staged_in.data_ptr(), staged_out.data_ptr(),
                                        static_cast<int>(chunk.numel()), MPI_FLOAT, MPI_SUM, comm_, &work->request));
    return work;
  }
  auto work = std::make_unique<MpiWork>(*this, "reduce_scatter(sum)", nullptr);
  work->keep_alive = flat;
  MPI_CHECK(MPI_Ireduce_scatter_block(flat.data_ptr(), chunk.data_ptr(), static_cast<int>(chunk.numel()),
                                      reduction_type(flat.scalar_type()), MPI_SUM, comm_, &work->request));
  return work;
}

}  // namespace t5scale
