// A group of ranks that run collectives together. Layers receive the communicator they use as a constructor
// argument; there is no global parallel state. Collectives derive element count and dtype from the tensor.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

namespace t5scale {

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

 private:
  std::string name_;
};

using CommunicatorPtr = std::shared_ptr<Communicator>;

}  // namespace t5scale
