// Adafactor as T5 was trained with it (Shazeer & Stern 2018), equal to transformers.optimization.Adafactor:
//   - matrices keep factored second moments: running averages of the row means and the column means of
//     grad^2 + eps1, from which the second moment is rebuilt as row x col / mean(row); vectors keep a full one;
//   - second-moment decay beta2_t = 1 - step^decay_rate (-0.8: T5's);
//   - the update g / sqrt(v) is divided by max(1, RMS(update) / clip_threshold);
//   - step size: the given learning rate, or the relative step min(1e-2, 1 / sqrt(step)) (warmup_init:
//     min(1e-6 * step, 1 / sqrt(step))); with scale_parameter times max(eps2, RMS(parameter before the step))
//     (the RMS of the fp32 master weights: for bf16/fp16 models more precise than that of the stored weights);
//   - optional first moment of the scaled update (beta1 > 0), and weight decay p -= weight_decay * lr * p as
//     Hugging Face applies it (with the scaled step size), for parameters weight_decay_applies() accepts.
//
// Tensor parallelism changes nothing: every mean, sum or RMS over a dimension that is split over TP is completed
// over the TP group (partial sums all-reduced, divided by the full element count), so the optimizer sees each
// full matrix. The partial sums of all parameters travel together: three all-reduces per step over TP, none
// over DP (every DP rank holds the same all-reduced gradients and updates alike). Replicated parameters need no
// reduction. ZeRO-1 is refused: it shards flat buckets across parameter boundaries, and the factored moments
// need whole rows and columns.
#pragma once

#include "train/distributed_optimizer.h"

namespace t5scale {

struct AdafactorOptions {
  bool relative_step = false;    // step size from the step number; the learning rate passed to step() is unused
  bool scale_parameter = false;  // step size x max(eps2, RMS(parameter))
  bool warmup_init = false;      // relative step 1e-6 * step at the start; needs relative_step
  double decay_rate = -0.8;      // beta2_t = 1 - step^decay_rate; <= 0
  double clip_threshold = 1.0;   // > 0
  double beta1 = 0.0;            // first moment of the update; 0: none (transformers' beta1=None)
  double eps1 = 1e-30;           // added to grad^2 before averaging
  double eps2 = 1e-3;            // lower bound of the parameter scale
  double weight_decay = 0.0;
};

class DistributedAdafactor final : public DistributedOptimizer {
 public:
  // Throws on invalid options and with ZeRO-1 buckets.
  // host_resident: parallel.offload_optimizer (DistributedOptimizer's top).
  DistributedAdafactor(GradientBuckets& gradients, const ProcessGrid& grid, AdafactorOptions options, bool host_resident = false);

  std::string name() const override { return "adafactor"; }

  // The step size before the parameter scale, for step number `step` (>= 1) and a given learning rate.
  double relative_step_size(int64_t step, double learning_rate) const;

  // exp_avg_sq_row drops the parameter's last dimension, exp_avg_sq_col the one before it: a split along a
  // dropped dimension leaves the statistic replicated (it was completed over TP).
  ParameterLayout state_layout(const ParameterLayout& parameter, const std::string& kind) const override;

 protected:
  double update(double learning_rate, const torch::Tensor& grad_scale) override;
  OptimizerState own_state() override;

 private:
  struct SlotState {
    size_t slot = 0;
    torch::Tensor master;  // view of the bucket's master weights, this rank's shard's shape
    bool factored = false;
    bool rows_split = false;  // factored, split along dim -2: column means and the mean of the row averages
                              // span TP
    bool cols_split = false;  // factored, split along dim -1: row means span TP
    bool split = false;       // any split: the RMS of the parameter and of the update span TP
    int64_t full_rows = 1, full_cols = 1, full_numel = 1;
    torch::Tensor exp_avg_sq_row;  // factored: shard shape without dim -1
    torch::Tensor exp_avg_sq_col;  // factored: shard shape without dim -2
    torch::Tensor exp_avg_sq;      // unfactored: shard shape
    torch::Tensor exp_avg;         // beta1 > 0: shard shape
  };

  AdafactorOptions options_;
  std::vector<SlotState> slots_;
};

}  // namespace t5scale
