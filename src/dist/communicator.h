// A group of ranks that run collectives together. Layers receive the communicator they use as a constructor
// argument; there is no global parallel state. Collectives derive element count and dtype from the tensor.
#pragma once

#include <torch/torch.h>

#include "core/check.h"

#include <memory>
#include <string>

namespace t5scale {

// A collective in flight. wait() returns once the result is in the tensor it was launched on; a collective that
// fails or exceeds the group's timeout brings the whole job down with the rank and the operation named.
class CollectiveWork {
 public:
  virtual ~CollectiveWork() = default;
  virtual void wait() = 0;
  // Orders the work queued afterwards on the calling thread's current device stream after this collective, without
  // blocking the host, and unlike wait() leaves the collective to be waited on again: a second stream (the
  // offloaded optimizer's gradient copies) reads its result beside the compute stream. True when done so, or when
  // the collective has already finished; false for one whose result is in place only once wait() returns (MPI).
  virtual bool order_current_stream() { return false; }
};

class Communicator {
 public:
  // rank in [0, size); name: "tp", "dp", "world", used in messages.
  Communicator(int rank, int size, std::string name) : rank_(rank), size_(size), name_(std::move(name)) {
    T5S_CHECK(size_ >= 1 && rank_ >= 0 && rank_ < size_, "rank ", rank_, " is not a rank of the ", name_,
              " group of ", size_);
  }
  virtual ~Communicator() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }

  // Sum over the group, in place: the asynchronous sum, waited on.
  void all_reduce_sum(torch::Tensor& tensor) { all_reduce_sum_async(tensor)->wait(); }
  // Maximum over the group, in place.
  virtual void all_reduce_max(torch::Tensor& tensor) = 0;
  // Every rank's tensor, stacked in rank order: (size, *tensor.shape).
  virtual torch::Tensor all_gather(const torch::Tensor& tensor) = 0;
  // The root's tensor, copied into every rank's tensor in place.
  virtual void broadcast(torch::Tensor& tensor, int root) = 0;
  // Sum over the group of a flat tensor of size() equal chunks; returns this rank's chunk of the sum, (numel / size).
  torch::Tensor reduce_scatter_sum(const torch::Tensor& flat) {
    T5S_CHECK_DIVISIBLE(flat.numel(), size_);
    torch::Tensor chunk = torch::empty({flat.numel() / size_}, flat.options());
    reduce_scatter_sum_async(flat.contiguous(), chunk)->wait();
    return chunk;
  }

  // Asynchronous sum in place; the tensor must not be touched until wait() returns.
  virtual std::unique_ptr<CollectiveWork> all_reduce_sum_async(torch::Tensor& tensor) = 0;
  // Asynchronous reduce-scatter of `flat` into `chunk` (flat.numel() / size() elements).
  virtual std::unique_ptr<CollectiveWork> reduce_scatter_sum_async(const torch::Tensor& flat, torch::Tensor& chunk) = 0;

 protected:
  const int rank_;
  const int size_;
  const std::string name_;
};

// A finished collective: what a one-rank group returns.
class CompletedWork final : public CollectiveWork {
 public:
  void wait() override {}
  bool order_current_stream() override { return true; }
};

// A group of one rank: every collective leaves its input as it is. The TP=1 and DP=1 case.
class SoloCommunicator final : public Communicator {
 public:
  explicit SoloCommunicator(std::string name) : Communicator(0, 1, std::move(name)) {}
  void all_reduce_max(torch::Tensor&) override {}
  torch::Tensor all_gather(const torch::Tensor& tensor) override { return tensor.unsqueeze(0).clone(); }
  void broadcast(torch::Tensor&, int) override {}
  std::unique_ptr<CollectiveWork> all_reduce_sum_async(torch::Tensor&) override {
    return std::make_unique<CompletedWork>();
  }
  std::unique_ptr<CollectiveWork> reduce_scatter_sum_async(const torch::Tensor& flat, torch::Tensor& chunk) override {
    chunk.copy_(flat.view(chunk.sizes()));
    return std::make_unique<CompletedWork>();
  }
};

using CommunicatorPtr = std::shared_ptr<Communicator>;

}  // namespace t5scale
