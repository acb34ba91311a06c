// AdamW over the fp32 gradient buckets, with fp32 master weights whatever the model's compute dtype. Without
// ZeRO-1 every DP rank updates the whole bucket; with ZeRO-1 each updates only the chunk it owns (its master
// weights and both moments are sharded over DP) and the chunks are all-gathered back into the parameters.
// The update is torch::optim::AdamW's, element for element (decoupled weight decay, bias-corrected moments).
#pragma once

#include "train/gradient_buckets.h"

namespace t5scale {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // applied to parameters whose slot has weight_decay set
};

class DistributedAdamW {
 public:
  DistributedAdamW(GradientBuckets& gradients, CommunicatorPtr tp, AdamWOptions options);

  // Global L2 norm of the reduced gradients times grad_scale: shards split over TP are summed over the TP group,
  // replicated parameters counted once; under ZeRO-1 the DP chunks are summed too. The same on every rank.
  double grad_norm(double grad_scale);
  // True on every rank when any rank's reduced gradients hold an inf or NaN (fp16 overflow).
  bool found_non_finite(Communicator& world);
  // One update with gradient g * grad_scale, then the parameters receive the new master weights.
  void step(double learning_rate, double grad_scale);

  int64_t step_count() const { return step_count_; }
  torch::Tensor master_weights(size_t bucket) const { return state_[bucket].master; }

 private:
  struct BucketState {
    torch::Tensor master, exp_avg, exp_avg_sq;  // the owned range, fp32
    torch::Tensor decays;                       // bool, owned range: weight decay applies
    torch::Tensor is_split;                     // bool, owned range: element of a TP-split parameter
  };
  void write_back(size_t bucket);

  GradientBuckets& gradients_;
  CommunicatorPtr tp_;
  AdamWOptions options_;
  std::vector<BucketState> state_;
  int64_t step_count_ = 0;
};

}  // namespace t5scale
