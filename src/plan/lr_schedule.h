// The learning-rate plan of a run, computed once from the config, the batch split and the sampler's epoch length:
// the LR scaling rule (none / linear / sqrt relative to a reference global batch), the warmup (optionally kept
// constant in samples as the batch grows), the total steps, and the LR of every update. The schedules are Hugging
// Face's (transformers/optimization.py), value for value and with the same step indexing, so that a run can be
// compared with one made by the Hugging Face Trainer. No LibTorch: the planner uses it too.
#pragma once

#include <cstdint>
#include <string>

#include "config/run_config.h"

namespace t5scale {

struct LrPlan {
  double base_lr = 0.0;       // optimizer.lr, tuned at the reference global batch
  double effective_lr = 0.0;  // the schedule's peak: base_lr x k, x sqrt(k) or x 1
  LrScalingSettings::Rule rule = LrScalingSettings::Rule::kNone;
  int64_t global_batch = 0;
  int64_t reference_global_batch = 0;
  double batch_ratio = 1.0;             // k = global_batch / reference_global_batch
  int64_t configured_warmup_steps = 0;  // from warmup_steps or warmup_ratio, before scale_warmup
  int64_t warmup_steps = 0;             // the warmup actually used
  bool warmup_scaled = false;
  LrScheduleSettings::Decay decay = LrScheduleSettings::Decay::kConstant;
  double min_lr_ratio = 0.0;
  int64_t inverse_sqrt_timescale = 0;    // inverse_sqrt only: warmup_steps, or 10000 without warmup (as HF)
  int64_t total_steps = 0;               // optimizer steps of the run
  int64_t steps_per_epoch = 0;           // 0 = unknown (a dataset not read yet, max_steps mode only)
  double epochs = 0.0;                   // total_steps / steps_per_epoch; NaN when unknown
  bool adafactor_relative_step = false;  // the optimizer ignores this plan's LR

  // The LR of update `step`, counted from 0 for the first update (Hugging Face's LambdaLR count: with warmup,
  // update 0 has LR 0). Linear and cosine reach min_lr_ratio x effective_lr at step == total_steps, i.e. after the
  // last update, and stay there beyond it.
  double lr_at(int64_t step) const;

  // One line for the log: base and effective LR with the rule, warmup, decay, total steps AND epochs.
  std::string describe() const;
};

// Steps per epoch when the sampler makes fixed global batches: the training split in global batches, the last
// incomplete one dropped with drop_last (data.drop_last) or counted otherwise.
int64_t optimizer_steps_per_epoch(int64_t num_examples, int64_t global_batch, bool drop_last);

// The plan for a config and its batch split (resolve_batch). steps_per_epoch: optimizer steps in one pass over
// the training split, from the sampler; it may be 0 (unknown) only with train.max_steps. Throws an Error naming
// the key for what cannot be planned: epochs without steps_per_epoch, a warmup longer than the run.
LrPlan make_lr_plan(const RunConfig& config, const BatchPlan& batch, int64_t steps_per_epoch);
LrPlan make_lr_plan(const RunConfig& config, int64_t world_size, int64_t steps_per_epoch);

}  // namespace t5scale
