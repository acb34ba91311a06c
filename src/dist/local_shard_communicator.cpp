#include "dist/local_shard_communicator.h"

#include "core/check.h"

namespace t5scale {

LocalShardCommunicator::LocalShardCommunicator(int size, std::string name, int rank)
    : Communicator(rank, size, std::move(name)) {}

torch::Tensor LocalShardCommunicator::all_gather(const torch::Tensor& tensor) {
  // A real all-gather writes size() tensors into a fresh buffer: the same allocation and the same writes here.
  std::vector<int64_t> shape{size_};
  for (int64_t d : tensor.sizes()) shape.push_back(d);
  return tensor.unsqueeze(0).expand(shape).contiguous();  // (size, *tensor.shape)
}

void LocalShardCommunicator::broadcast(torch::Tensor& tensor, int root) {
  T5S_CHECK(root >= 0 && root < size_, "broadcast root ", root, " is not a rank of the ", name_, " group of ", size_);
}

std::unique_ptr<CollectiveWork> LocalShardCommunicator::all_reduce_sum_async(torch::Tensor& tensor) {
  return std::make_unique<CompletedWork>();
}

std::unique_ptr<CollectiveWork> LocalShardCommunicator::reduce_scatter_sum_async(const torch::Tensor& flat,
                                                                                 torch::Tensor& chunk) {
  T5S_CHECK(chunk.numel() * size_ == flat.numel(), "reduce-scatter of ", flat.numel(), " elements over ", size_,
            " ranks needs a chunk of ", flat.numel() / size_, ", got ", chunk.numel());
  chunk.copy_(flat.reshape({-1}).narrow(0, rank_ * chunk.numel(), chunk.numel()).view(chunk.sizes()));
  return std::make_unique<CompletedWork>();
}

}  // namespace t5scale
