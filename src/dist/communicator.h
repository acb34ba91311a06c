// A group of ranks that run collectives together. Layers receive the communicator they use as a constructor
// argument; there is no global parallel state. Collectives derive element count and dtype from the tensor.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

namespace t5scale {

// A collective in flight. wait() returns once the result is in the tensor it was launched on; a collective that
// fails or exceeds the group's timeout brings the whole job down with the rank and the operation named.
class CollectiveWork {
 public:
  virtual ~CollectiveWork() = default;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "tp", "dp", "world": used in messages

  // Sum (or maximum) over the group, in place.
  virtual void all_reduce_sum(torch::Tensor& tensor) = 0;
  virtual void all_reduce_max(torch::Tensor& tensor) = 0;
  // Every rank's tensor, stacked in rank order: (size, *tensor.shape).
  virtual torch::Tensor all_gather(const torch::Tensor& tensor) = 0;
  // The root's tensor, copied into every rank's tensor in place.
  virtual void broadcast(torch::Tensor& tensor, int root) = 0;
  // Sum over the group of a flat tensor of size() equal chunks; returns this rank's chunk of the sum.
  virtual torch::Tensor reduce_scatter_sum(const torch::Tensor& flat) = 0;

  // Asynchronous sum in place; the tensor must not be touched until wait() returns.
  virtual std::unique_ptr<CollectiveWork> all_reduce_sum_async(torch::Tensor& tensor) = 0;
  // Asynchronous reduce-scatter of `flat` into `chunk` (flat.numel() / size() elements).
  virtual std::unique_ptr<CollectiveWork> reduce_scatter_sum_async(const torch::Tensor& flat, torch::Tensor& chunk) = 0;
};

// A finished collective: what a one-rank group returns.
class CompletedWork final : public CollectiveWork {
 public:
  void wait() override {}
};

// A group of one rank: every collective leaves its input as it is. The TP=1 and DP=1 case.
class SoloCommunicator final : public Communicator {
 public:
  explicit SoloCommunicator(std::string name) : name_(std::move(name)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return name_; }
  void all_reduce_sum(torch::Tensor&) override {}
  void all_reduce_max(torch::Tensor&) override {}
  torch::Tensor all_gather(const torch::Tensor& tensor) override { return tensor.unsqueeze(0).clone(); }
  void broadcast(torch::Tensor&, int) override {}
  torch::Tensor reduce_scatter_sum(const torch::Tensor& flat) override { return flat.clone(); }
  std::unique_ptr<CollectiveWork> all_reduce_sum_async(torch::Tensor&) override {
    return std::make_unique<CompletedWork>();
  }
  std::unique_ptr<CollectiveWork> reduce_scatter_sum_async(const torch::Tensor& flat, torch::Tensor& chunk) override {
    chunk.copy_(flat);
    return std::make_unique<CompletedWork>();
  }

 private:
  std::string name_;
};

using CommunicatorPtr = std::shared_ptr<Communicator>;

}  // namespace t5scale
