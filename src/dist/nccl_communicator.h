// The NCCL backend of Communicator, for CUDA tensors. The unique id travels over the group's MPI communicator;
// initialisation is non-blocking and polled. Collectives run on a dedicated communication stream that first waits
// (CUDA event) for the compute stream; wait() makes the compute stream wait for the collective and, until the
// collective is done, polls NCCL for asynchronous errors and the timeout: either aborts the communicator and the
// whole job with the rank, the group and the operation named.
#pragma once

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <mpi.h>
#include <nccl.h>

#include <functional>

#include "dist/communicator.h"

namespace t5scale {

class NcclCommunicator final : public Communicator {
 public:
  // `group` is the MPI communicator of the same ranks (taken over and freed); `device` the CUDA device index.
  NcclCommunicator(MPI_Comm group, std::string name, int device, double timeout_s);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }
  void all_reduce_sum(torch::Tensor& tensor) override;
  void all_reduce_max(torch::Tensor& tensor) override;
  torch::Tensor all_gather(const torch::Tensor& tensor) override;
  void broadcast(torch::Tensor& tensor, int root) override;
  torch::Tensor reduce_scatter_sum(const torch::Tensor& flat) override;
  std::unique_ptr<CollectiveWork> all_reduce_sum_async(torch::Tensor& tensor) override;
  std::unique_ptr<CollectiveWork> reduce_scatter_sum_async(const torch::Tensor& flat, torch::Tensor& chunk) override;

  // Blocks until `done` has completed, checking NCCL for errors and the timeout meanwhile.
  void poll(const at::cuda::CUDAEvent& done, const char* operation);

 private:
  using Launch = std::function<ncclResult_t(cudaStream_t)>;
  std::unique_ptr<CollectiveWork> enqueue(const char* operation, const std::vector<torch::Tensor>& tensors,
                                          const Launch& launch);
  void check(ncclResult_t result, const char* operation);
  void wait_while_in_progress(const char* operation);
  [[noreturn]] void fail(const std::string& what);

  MPI_Comm group_;
  std::string name_;
  int device_;
  double timeout_s_;
  int rank_ = 0, size_ = 1;
  ncclComm_t comm_ = nullptr;
  c10::cuda::CUDAStream stream_;
};

// The CUDA device for this rank: its rank among the ranks sharing its node, modulo the visible devices.
int local_cuda_device();

}  // namespace t5scale
