// One training step over a TP x DP grid, top to bottom:
//   1. count the target tokens of the global batch (all micro-batches, all DP replicas);
//   2. for each micro-batch: forward, summed token cross-entropy / global token count (x loss scale in fp16),
//      backward; gradients gather in fp32 buckets, reduced over DP during the last micro-batch's backward;
//   3. wait for the reductions; fp16: skip the step everywhere if any rank overflowed, and lower the scale;
//   4. global gradient norm, clipping folded into the gradient scale (on the device);
//   5. AdamW (ZeRO-1: on this rank's chunk) or Adafactor on the fp32 master weights, written back to the
//      parameters (3-5: DistributedOptimizer::step).
// The loss is the mean over every target token of the global batch, so any grid, and any split into
// micro-batches, computes what one rank computes on the whole batch. The step reads back to the host once, at its
// end (loss, token count, gradient norm together); fp16 adds the overflow check's read-back.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "dist/process_grid.h"
#include "model/t5_model.h"
#include "telemetry/step_record.h"
#include "train/distributed_adafactor.h"
#include "train/distributed_adamw.h"
#include "train/gradient_buckets.h"

namespace t5scale {

using Precision = RunConfig::Precision;  // the config's own enum (precision)
torch::ScalarType compute_dtype(Precision precision);

enum class OptimizerKind { kAdamW, kAdafactor };

// FreezeOptions and frozen_parameter_names: config/model_config.h (the planner predicts memory with them too).

struct ParallelTrainingOptions {
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  AdamWOptions adamw;
  AdafactorOptions adafactor;  // optimizer kAdafactor; refused with zero1
  FreezeOptions freeze;
  double max_grad_norm = 1.0;  // 0: no clipping
  bool zero1 = false;  // the optimizer state sharded over DP
  bool zero2 = false;  // the fp32 gradients too (needs zero1)
  bool offload_optimizer = false;  // master weights and moments in host memory, the update on the CPU
  int64_t bucket_bytes = 25 * 1024 * 1024;
  Precision precision = Precision::kFp32;
  double initial_loss_scale = 65536.0;  // fp16 only
  int64_t loss_scale_growth_interval = 1000;
  // The linear layers' weight gradients computed straight into the fp32 buckets (GradientBuckets::
  // weight_gradient_sink); false: through each weight's .grad, as autograd leaves it.
  bool weight_gradients_into_buckets = true;
};

// The training options a run config asks for (optimizer, freezing, clipping, ZeRO-1, buckets, precision).
ParallelTrainingOptions training_options_for(const RunConfig& config);

// A step as the trainer saw it: the StepRecord fields the trainer fills (telemetry/step_record.h: loss, lr as
// used, grad_norm before clipping, loss_scale, skipped, the global batch's target_tokens, and this rank's four
// phase times), plus what only a benchmark reads. The phase times on a GPU: CUDA events on the compute stream at
// each boundary, read after the step's one host synchronisation, so each phase holds the time of its own kernels;
// comm_exposed is the wait for the DP reductions after the last backward, the part backward did not hide.
struct StepResult : StepRecord {
  // The peak of live tensor bytes in each phase (the reductions after backward count with the optimizer), where a
  // CpuMemoryTracker counts them (t5scale-bench on the CPU); -1 elsewhere.
  int64_t forward_peak_bytes = -1, backward_peak_bytes = -1, optimizer_peak_bytes = -1;
};

// This DP replica's share of a global batch (rows dp_rank * B / dp onward), split into equal micro-batches.
// Every rank of a replica gets the same rows; B must be divisible by dp x micro_batches.
std::vector<Seq2SeqBatch> replica_micro_batches(const Seq2SeqBatch& global, const ProcessGrid& grid,
                                                int64_t micro_batches);

class ParallelTrainer {
 public:
  // The model must be built over grid.tp. The parameters options.freeze selects get requires_grad false; those,
  // and any whose requires_grad was already false, are frozen: no gradient, no optimizer state. Weight decay
  // skips norms and biases (weight_decay_applies()).
  ParallelTrainer(T5Model model, ProcessGrid grid, ParallelTrainingOptions options);
  ~ParallelTrainer();  // takes its weight-gradient sinks out of the model, which may outlive it
  ParallelTrainer(const ParallelTrainer&) = delete;
  ParallelTrainer& operator=(const ParallelTrainer&) = delete;

  // micro_batches: this DP replica's share of the global batch, one entry per micro-batch, on the host (the step
  // copies them to the model's device).
  StepResult step(const std::vector<Seq2SeqBatch>& micro_batches, double learning_rate);

  GradientBuckets& gradients() { return *gradients_; }
  DistributedOptimizer& optimizer() { return *optimizer_; }
  T5Model& model() { return model_; }
  const ProcessGrid& grid() const { return grid_; }
  // Every frozen parameter's name (selected by options.freeze or frozen before), in the model's order.
  const std::vector<std::string>& frozen_parameters() const { return frozen_; }

  // fp16 loss scaling, for checkpoints: the scale and the steps since the last overflow.
  double loss_scale() const { return loss_scale_; }
  int64_t steps_since_overflow() const { return steps_since_overflow_; }
  void set_loss_scale_state(double loss_scale, int64_t steps_since_overflow);

 private:
  T5Model model_;
  ProcessGrid grid_;
  ParallelTrainingOptions options_;
  std::unique_ptr<GradientBuckets> gradients_;
  std::unique_ptr<DistributedOptimizer> optimizer_;
  std::vector<std::string> frozen_;
  std::vector<WeightGradientSink*> installed_sinks_;  // the layers' sinks this trainer set
  // Under sequence parallelism each TP rank's norm weights get a part of their gradient (each rank normalises its
  // own tokens). The norms leave it so (RMSNormImpl::sum_weight_grad_over_tp false), and the step sums the parts of
  // every norm over TP in one all-reduce after the DP reduction, instead of one per norm and micro-batch in backward.
  void sum_norm_gradients_over_tp();
  std::vector<RMSNormImpl*> norms_;  // every norm of the model, whose flag this trainer set
  std::vector<size_t> norm_slots_;   // the trainable norms' gradient slots, in the model's order
  double loss_scale_ = 1.0;
  int64_t steps_since_overflow_ = 0;
};

}  // namespace t5scale
