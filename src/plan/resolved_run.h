// Everything a run is, resolved once from its config, its world and what its data holds: the batch split, the
// sampler's options and steps per epoch, the model shape, the LR plan and step count, the memory model's inputs,
// the activation checkpointing, the predicted memory and the model FLOPs of a step. The planner (t5scale-study)
// and the trainer (t5scale-train) both call resolve_run, so the plan predicts what the job does by construction;
// they differ only in what they know (the planner may not have the dataset yet, the trainer has its device).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "config/run_config.h"
#include "data/batch_sampler.h"
#include "plan/cost_model.h"
#include "plan/lr_schedule.h"
#include "plan/machine_rates.h"
#include "plan/step_time_model.h"

namespace t5scale {

// Where the run runs.
struct RunWorld {
  int64_t world_size = 1;
  bool on_gpu = false;             // the memory model adds the CUDA context and communication buffers
  bool fused_attention = true;     // on a GPU: SDPA's fused kernel (false: the explicit path; MemoryInputs)
  bool half_products_through_fp32 = false;  // on the CPU, as probed (MemoryInputs); false where not probed
  int64_t device_share_bytes = 0;  // the memory one rank may use (checkpointing auto, the fit); 0: unknown
  int64_t nodes = 1;               // the step-time model's DP link: a group across nodes uses the network
  int64_t ranks_per_node = 1;
  std::optional<MachineRates> rates;  // the step-time model's machine; none: no step time predicted
};

// What the run's data holds, as far as the caller knows it.
struct RunData {
  int64_t vocab_size = 0;        // the data's vocabulary (the tiny model is sized to it); 0: unknown
  int64_t train_examples = -1;   // the training split's size; -1: unknown (a dataset not there yet)
  // The training split's lengths as the trainer cuts them (data.max_source_length / max_target_length); empty when
  // unknown. Given, the steps per epoch are the sampler's own count; without them a token budget leaves it unknown.
  std::vector<int64_t> source_lengths, target_lengths;
};

struct ResolvedRun {
  // Every reason the run cannot start ("<key>: <reason>"), and what deserves a look but does not stop it.
  std::vector<std::string> errors;
  std::vector<std::string> notes;

  std::optional<BatchPlan> batch;
  int64_t train_examples = -1;  // the training split's size (RunData's); -1: unknown
  BatchSamplerOptions sampler;  // for DP rank 0: a trainer's rank sets its own dp_rank
  int64_t steps_per_epoch = 0;  // optimizer steps in one pass over the training split; 0: unknown
  int64_t eval_every_steps = 0;  // evaluation_interval_steps: 0 = none during training, or not known yet

  std::optional<ModelConfig> model;
  std::string model_error;  // why the shape could not be resolved (also among errors)

  std::optional<LrPlan> lr;     // the LR after its scaling rule; total_steps only when steps_known
  bool steps_known = false;     // the run's optimizer steps (never for evaluation alone)
  bool warmup_known = false;
  int64_t total_steps = 0;
  double epochs = std::numeric_limits<double>::quiet_NaN();

  // The memory model's inputs for one micro-batch padded to the maximum lengths, with the checkpointing resolved;
  // set with the model and the batch.
  std::optional<MemoryInputs> memory_inputs;
  CheckpointingChoice checkpointing;  // its memory: the prediction; fits: against world.device_share_bytes
  // Model FLOPs of one optimizer step, as the trainer counts them (padding not counted), of the step step_time is
  // for: with the data's lengths, the sampled step of median predicted time (of median FLOPs without rates); else
  // one global batch at the planned lengths.
  double flops_per_step = std::numeric_limits<double>::quiet_NaN();
  // Source and target tokens of that step (padding not counted); NaN without the data's lengths.
  double tokens_per_step = std::numeric_limits<double>::quiet_NaN();
  // The step time on world.rates: with the data's lengths the median of the first sampled steps, each as the
  // collation pads it; else the micro-batch above (padded to the maximum lengths). Set with the memory.
  std::optional<StepTimePrediction> step_time;
};

ResolvedRun resolve_run(const RunConfig& config, const RunWorld& world, const RunData& data);

// The sampler's options for a batch split (dp_rank 0).
BatchSamplerOptions sampler_options(const RunConfig& config, const BatchPlan& batch);

// The micro-batch the memory and FLOP models count: data.max_source_length x max_target_length, or the lengths
// T5 was pre-trained with (512 / 128) where the data's own lengths are kept.
BatchShape planned_micro_batch(const RunConfig& config, const BatchPlan& batch);

}  // namespace t5scale
