// An optimizer on its own, without a model: named parameters (replicated, one rank) in gradient buckets, and
// gradients written straight into the buckets' main gradients, so that an update can be compared with a
// reference optimizer given exactly the same gradients.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist/process_grid.h"
#include "train/distributed_optimizer.h"
#include "train/gradient_buckets.h"

namespace t5scale::testing {

class OptimizerHarness {
 public:
  // Parameters are copies of `initial` (leaf tensors with requires_grad), weight decay by weight_decay_applies().
  OptimizerHarness(const std::vector<std::pair<std::string, torch::Tensor>>& initial, int64_t bucket_bytes)
      : grid(ProcessGrid::solo()) {
    std::vector<ParameterSlot> slots;
    for (const auto& [name, value] : initial) {
      ParameterSlot slot;
      slot.name = name;
      slot.param = value.detach().clone().set_requires_grad(true);
      slot.layout = ParameterLayout{name, value.sizes().vec(), -1};
      slot.weight_decay = weight_decay_applies(name);
      params.push_back(slot.param);
      slots.push_back(std::move(slot));
    }
    gradients = std::make_unique<GradientBuckets>(std::move(slots), grid.dp, bucket_bytes, GradientSharding::kNone);
  }

  // The main gradients of the next step: grads[k] for the k-th parameter.
  void set_gradients(const std::vector<torch::Tensor>& grads) {
    gradients->begin_step();
    for (size_t k = 0; k < gradients->slots().size(); ++k) gradients->accumulate(k, grads[k]);
  }

  ProcessGrid grid;
  std::vector<torch::Tensor> params;
  std::unique_ptr<GradientBuckets> gradients;
};

}  // namespace t5scale::testing
