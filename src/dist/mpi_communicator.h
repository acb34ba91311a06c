// The MPI backend of Communicator, for CPU tensors: every parallel path runs on a machine without a GPU.
// fp32, fp64 and integer tensors are reduced natively; bf16 and fp16 are staged through fp32. Every collective is
// non-blocking underneath and waited on by polling, so one that exceeds the timeout aborts the whole job with the
// group, the rank and the operation named instead of hanging.
#pragma once

#include <mpi.h>

#include "dist/communicator.h"

namespace t5scale {

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed on destruction).
  MpiCommunicator(MPI_Comm comm, std::string name, double timeout_s);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  void all_reduce_max(torch::Tensor& tensor) override;
  torch::Tensor all_gather(const torch::Tensor& tensor) override;
  void broadcast(torch::Tensor& tensor, int root) override;
  std::unique_ptr<CollectiveWork> all_reduce_sum_async(torch::Tensor& tensor) override;
  std::unique_ptr<CollectiveWork> reduce_scatter_sum_async(const torch::Tensor& flat, torch::Tensor& chunk) override;

  // Polls `request` until it completes; aborts the job once timeout_s has passed.
  void wait(MPI_Request& request, const char* operation) const;
  MPI_Comm comm() const { return comm_; }

 private:
  std::unique_ptr<CollectiveWork> all_reduce_async(torch::Tensor& tensor, MPI_Op op, const char* operation);

  MPI_Comm comm_;
  double timeout_s_;
};

}  // namespace t5scale
