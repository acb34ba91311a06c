// AdamW over the fp32 gradient buckets, with fp32 master weights whatever the model's compute dtype. Without
// ZeRO-1 every DP rank updates the whole bucket; with ZeRO-1 each updates only the chunk it owns (its master
// weights and both moments are sharded over DP) and the chunks are all-gathered back into the parameters.
// The update is torch::optim::AdamW's, element for element (decoupled weight decay, bias-corrected moments).
// Two paths compute it: ATen's fused kernel (at::_fused_adamw_, one pass over every tensor, CPU and CUDA), and
// whole-bucket tensor operations where the kernel is not available or is switched off. They differ by fp32
// rounding only (tests/train/test_fused_adamw.cpp).
#pragma once

#include "config/run_config.h"
#include "train/distributed_optimizer.h"

namespace t5scale {

// The config's own enum (optimizer.fused); auto: the fused kernel where the device and dtype allow it.
using FusedMode = OptimizerSettings::Fused;

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // applied to parameters whose slot has weight_decay set (weight_decay_applies)
  FusedMode fused = FusedMode::kAuto;
};

// Whether at::_fused_adamw_ has a kernel for master weights of this dtype on this device (fp32 or fp64 on the
// CPU or a CUDA device).
bool fused_adamw_supported(torch::Device device, torch::ScalarType dtype);

class DistributedAdamW final : public DistributedOptimizer {
 public:
  // Throws when options.fused is kOn and the fused kernel cannot run on the buckets' device and dtype.
  // host_resident: parallel.offload_optimizer (DistributedOptimizer's top).
  DistributedAdamW(GradientBuckets& gradients, const ProcessGrid& grid, AdamWOptions options, bool host_resident = false);

  std::string name() const override { return "adamw"; }
  bool fused() const { return fused_; }

 protected:
  double update(double learning_rate, const torch::Tensor& grad_scale) override;
  OptimizerState own_state() override;

 private:
  // A run of consecutive elements of a bucket's owned range with one weight-decay setting: the fused kernel
  // takes one weight decay per call, so the runs are grouped into a decayed and an undecayed call.
  struct Segment {
    size_t bucket;
    int64_t begin, length;  // within the owned range
    bool decays;
  };
  // grad_divisor: what the kernel divides the gradients by (its grad_scale), fp32; undefined: none.
  void update_fused(double learning_rate, const torch::Tensor& grad_divisor);
  void update_whole_buckets(double learning_rate);

  AdamWOptions options_;
  bool fused_ = false;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;  // per bucket, owned range
  std::vector<torch::Tensor> decays_;                // per bucket, bool, owned range: weight decay applies
  std::vector<Segment> segments_;
  torch::Tensor fused_steps_;  // (segments,) fp32 on the device: the step number the fused kernel reads
};

}  // namespace t5scale
