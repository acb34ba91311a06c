// What every optimizer over the fp32 gradient buckets shares, written once: the fp32 master weights and their
// write-back into the parameters, the global gradient norm, clipping, the non-finite check, and the order in
// which they happen in a step. DistributedAdamW and DistributedAdafactor supply only the update itself.
//
// A step, on every rank alike:
//   1. (fp16) any inf/NaN in any rank's reduced gradients: skip, nothing changes;
//   2. the global L2 norm of the true gradient (main gradients / loss scale), TP shards summed, replicated
//      parameters counted once, ZeRO-1 chunks summed over DP;
//   3. clipping as torch::nn::utils::clip_grad_norm_: the gradient is scaled by max_norm / (norm + 1e-6) where that
//      is below 1 (folded, with 1 / loss scale, into one gradient scale);
//   4. the optimizer's update of the master weights with the gradients times that scale (fused AdamW folds it into
//      its kernel as grad_scale; the others multiply in place first; a scale of exactly 1, no loss scale and no
//      clipping, costs no pass), after which the reduced gradients hold the unscaled, clipped gradient the update
//      used; write-back to the parameters, one copy per bucket.
//
// Host-resident state (parallel.offload_optimizer, DeepSpeed's ZeRO-Offload): the master weights and every moment
// live in host memory (pinned where the gradients are on CUDA), the update is the same code run on host tensors by
// the CPU cores, reading a host copy of each owned gradient bucket (GradientBuckets::keep_host_copies(): copied once
// per step as soon as the bucket is reduced, while backward goes on, and waited for bucket by bucket as the update
// reads it; the norm and the non-finite check still read the reduced gradients where they are, and the gradient
// scale of steps 3 and 4 is applied to the host copy in the update, as it is to the reduced gradients without
// offload), and each bucket's new weights go
// back as one copy in the parameters' dtype. The arithmetic is the same, so on the CPU the step is bit for bit the
// step without it; the checkpoint's state has the same names and shapes. (Step 4's unscaled, clipped gradient is then
// the host copy; the reduced gradients on the device stay as reduced.)
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "dist/process_grid.h"
#include "train/gradient_buckets.h"

namespace t5scale {

// Weight decay skips norms and biases: names containing "norm" or "bias" (T5 has layer norms and, in the relative
// position bias, a bias table; Hugging Face's Trainer excludes the same two kinds). Both optimizers use this rule.
bool weight_decay_applies(const std::string& parameter_name);

struct GradientScaling {
  double loss_scale = 1.0;       // the main gradients hold loss_scale x the gradient (fp16 loss scaling)
  double max_grad_norm = 0.0;    // clip the global norm to this; 0: no clipping
  bool skip_non_finite = false;  // look for inf/NaN on every rank first (fp16); skip the step if any
};

struct StepOutcome {
  bool skipped = false;        // a non-finite gradient on some rank: nothing was updated
  // Global norm of the gradient before clipping (0 when skipped): a 0-d fp64 tensor on the gradients' device,
  // so that the step needs no host synchronisation for it; read it with the step's other figures.
  torch::Tensor grad_norm;
  double learning_rate = 0.0;  // the step size used: the given rate, or Adafactor's relative step (before its
                               // per-parameter RMS scale)
};

// Optimizer state as named tensors, for checkpoints: the live tensors, so that loading copies into them.
// Three kinds of name:
//   "step"                     the step count, a 0-d int64 tensor;
//   "<kind>.<bucket>"          bucket-wise state ("master.3", AdamW's "exp_avg.3"): bucket 3's owned range, element
//                              for element beside the master weights;
//   "<parameter>.<kind>"       parameter-wise state (Adafactor's "...q.weight.exp_avg_sq_row"): one parameter's
//                              TP shard, laid out as DistributedOptimizer::state_layout() says.
using OptimizerState = std::vector<std::pair<std::string, torch::Tensor>>;

struct StateName {
  std::string kind;       // "step", "master", "exp_avg", "exp_avg_sq_row", ...
  int64_t bucket = -1;    // bucket-wise state: the bucket
  std::string parameter;  // parameter-wise state: the parameter
};
// The parts of a state() name (a name ending in ".<digits>" is bucket-wise: parameter names end in a word).
StateName parse_state_name(const std::string& name);

class DistributedOptimizer {
 public:
  virtual ~DistributedOptimizer() = default;
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  virtual std::string name() const = 0;  // "adamw", "adafactor"

  // One whole step (see the top of the file). The gradients must be reduced (GradientBuckets::finish()).
  StepOutcome step(double learning_rate, const GradientScaling& scaling = {});

  // Global L2 norm of the reduced gradients times grad_scale, a 0-d fp64 tensor on their device. The same on
  // every rank.
  torch::Tensor grad_norm(double grad_scale);
  // True on every rank when any rank's reduced gradients hold an inf or NaN (fp16 overflow).
  bool found_non_finite(Communicator& world);

  int64_t step_count() const { return step_count_; }
  torch::Device device() const;  // where the reduced gradients live (the master weights too unless host-resident)
  bool host_resident() const { return host_resident_; }  // master weights and moments in host memory
  // The fp32 (fp64 for fp64 models) master weights of the range of `bucket` this rank owns.
  torch::Tensor master_weights(size_t bucket) const { return master_[bucket]; }

  // Named state (master weights, moments, the step count as a 0-d int64 tensor "step"), this rank's part.
  OptimizerState state();
  // Copies a state saved by state() of an optimizer of the same kind over the same buckets; the parameters
  // receive the loaded master weights. Names and shapes must match.
  void load_state(const OptimizerState& saved);
  // How parameter-wise state of `kind` is laid out over TP, for a parameter laid out as `parameter` (its full shape
  // and split dimension): the parameter's own layout unless the kind drops dimensions (Adafactor's factored
  // moments).
  virtual ParameterLayout state_layout(const ParameterLayout& parameter, const std::string& kind) const;

  GradientBuckets& gradients() { return gradients_; }
  Communicator& tp() { return *tp_; }

 protected:
  // host_resident: the master weights (and so every state made like them) in host memory (see the top).
  DistributedOptimizer(GradientBuckets& gradients, const ProcessGrid& grid, bool host_resident);

  // The owned gradient the update reads: the reduced gradient itself, or its host copy when host-resident (once it
  // has landed: this waits for it).
  torch::Tensor update_grad(size_t bucket) const {
    return host_resident_ ? gradients_.host_grad(bucket) : gradients_.owned_grad(bucket);
  }

  // The update with the owned gradients times grad_scale (a 0-d tensor on their device in their dtype; undefined:
  // 1), for step number step_count() (already incremented). An update that does not fold the scale into its own
  // pass calls scale_gradients(grad_scale) first. Returns the step size for StepOutcome::learning_rate.
  virtual double update(double learning_rate, const torch::Tensor& grad_scale) = 0;
  // The owned gradients multiplied by grad_scale in place (nothing when it is undefined).
  void scale_gradients(const torch::Tensor& grad_scale);
  // The optimizer's own state tensors (without master weights and step), named.
  virtual OptimizerState own_state() = 0;

  // The parameters of `bucket` receive the master weights (all-gathered over DP under ZeRO-1): one copy into the
  // bucket's parameter buffer.
  void write_back(size_t bucket);

  GradientBuckets& gradients_;
  CommunicatorPtr tp_;
  CommunicatorPtr world_;
  std::vector<torch::Tensor> master_;    // per bucket, the owned range: (owned elements,), fp32 or fp64
  bool host_resident_ = false;
  // Host-resident: per bucket, the new weights in the parameters' dtype before their one copy to the device (where
  // that is not the host), (owned elements,), pinned. (The host copies of the gradients are the buckets'.)
  std::vector<torch::Tensor> host_staging_;
  // Per bucket: its parameters' storage is the master buffer itself (no ZeRO-1 and parameters in the masters'
  // dtype, i.e. fp32/fp64 training), so the update writes the parameters and there is nothing to write back.
  std::vector<bool> parameters_are_masters_;
  // Per bucket where they are not: the parameters' one flat buffer in their own dtype (bf16, fp16; fp32 under
  // ZeRO-1), (elements,), of which every parameter of the bucket is a view.
  std::vector<torch::Tensor> parameter_buffers_;
  // The owned range of each bucket as maximal runs of elements alike in being TP-split or replicated: what the
  // gradient norm reads.
  struct NormRun {
    size_t bucket;
    int64_t begin, length;  // in the owned range
    bool split;
  };
  std::vector<NormRun> norm_runs_;
  int64_t step_count_ = 0;
};

}  // namespace t5scale
