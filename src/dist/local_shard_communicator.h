// A stand-in group for measuring one rank's share of a TP = N model on one device: it says it has N ranks and is
// rank 0 (or a given rank), so the model is built with exactly one rank's parameter shapes and does one rank's
// compute, while its collectives are local operations that produce tensors of the shapes the real ones would,
// without any transfer:
//
//   all_reduce_sum / all_reduce_max   in place, the input left as it is (what NCCL does in place, minus the wire)
//   all_gather                        (N, *shape): the input in every slot
//   reduce_scatter_sum                this rank's chunk of the input (flat.numel() / N elements)
//   broadcast                         the input left as it is
//
// Results are not those of a real group (nothing is summed): it exists for timing compute and memory, never for
// training. Megatron-LM measures the per-GPU compute of a TP model on one GPU the same way. t5scale-ckpt reshard
// builds each rank of a target grid in one process with such groups, to lay out its optimizer state.
#pragma once

#include <memory>
#include <string>

#include "dist/communicator.h"

namespace t5scale {

class LocalShardCommunicator final : public Communicator {
 public:
  // size: the group size whose rank's share is built (>= 1); name: the group's name in messages.
  LocalShardCommunicator(int size, std::string name, int rank = 0);

  void all_reduce_max(torch::Tensor& tensor) override {}
  torch::Tensor all_gather(const torch::Tensor& tensor) override;
  void broadcast(torch::Tensor& tensor, int root) override;
  std::unique_ptr<CollectiveWork> all_reduce_sum_async(torch::Tensor& tensor) override;
  std::unique_ptr<CollectiveWork> reduce_scatter_sum_async(const torch::Tensor& flat, torch::Tensor& chunk) override;
};

}  // namespace t5scale
