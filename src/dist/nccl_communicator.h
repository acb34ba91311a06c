// The NCCL backend of Communicator, for CUDA tensors on the rank's one GPU (ProcessGrid chooses it and makes it
// current). The unique id travels over the group's MPI communicator; initialisation is non-blocking and polled.
//
// Stream order, never the host, carries the dependencies. A collective runs on the communicator's own stream once
// an event recorded on the caller's current stream (the compute stream) has completed, and records a completion
// event there; the blocking calls make the compute stream wait for that event and return at once, and an async
// call's wait() does the same on the stream current when it is called. The host waits only where it reads a
// result (.item(), .cpu()), and then only for its own stream. Reductions and broadcasts work in place.
//
// Because no host thread waits for a collective, a watchdog thread per communicator does: it follows the
// collectives in flight (they complete in launch order, on one stream) and polls NCCL for asynchronous errors. A
// collective still pending timeout_s after its launch, or an NCCL error, prints the rank, the group and the
// operation, aborts the communicator (which frees kernels waiting on dead peers) and ends the job (MPI_Abort).
// The timeout counts from the host's launch, which may run ahead of the GPU by up to a step: it must exceed the
// longest step (parallel.collective_timeout_s, 600 s by default).
#pragma once

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "dist/communicator.h"

namespace t5scale {

class NcclCommunicator final : public Communicator {
 public:
  // `group` is the MPI communicator of the same ranks (taken over and freed); `device` the CUDA device index this
  // rank drives, the same for every communicator of the rank and for its model.
  NcclCommunicator(MPI_Comm group, std::string name, int device, double timeout_s);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  void all_reduce_max(torch::Tensor& tensor) override;
  torch::Tensor all_gather(const torch::Tensor& tensor) override;
  void broadcast(torch::Tensor& tensor, int root) override;
  std::unique_ptr<CollectiveWork> all_reduce_sum_async(torch::Tensor& tensor) override;
  std::unique_ptr<CollectiveWork> reduce_scatter_sum_async(const torch::Tensor& flat, torch::Tensor& chunk) override;

  int device() const { return device_; }

 private:
  using Launch = std::function<ncclResult_t(cudaStream_t)>;
  // A collective the watchdog follows until its completion event has fired.
  struct InFlight {
    std::shared_ptr<at::cuda::CUDAEvent> done;
    const char* operation;
    std::chrono::steady_clock::time_point launched;
  };

  // Launches one collective on the communication stream after the current stream's work so far; returns the
  // event that fires when it has finished (the watchdog follows it).
  std::shared_ptr<at::cuda::CUDAEvent> launch(const char* operation, const std::vector<torch::Tensor>& tensors,
                                              const Launch& call);
  void check(ncclResult_t result, const char* operation);
  void wait_while_in_progress(const char* operation);
  void watch();
  [[noreturn]] void fail(const std::string& what);

  MPI_Comm group_;
  int device_;
  double timeout_s_;
  ncclComm_t comm_ = nullptr;
  c10::cuda::CUDAStream stream_;

  std::mutex launch_mutex_;  // one NCCL call at a time on this communicator (gradient hooks run on other threads)
  std::mutex in_flight_mutex_;
  std::condition_variable in_flight_changed_;
  std::deque<InFlight> in_flight_;  // launch order = completion order (one stream)
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace t5scale
