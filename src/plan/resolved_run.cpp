#include "plan/resolved_run.h"

#include <algorithm>
#include <filesystem>

#include "config/hf_config.h"
#include "core/check.h"
#include "core/units.h"

namespace t5scale {
namespace {

namespace fs = std::filesystem;

// The batch split; its errors are validate_for_world's, which every caller has reported already.
void resolve_batch_split(const RunConfig& c, const RunWorld& world, ResolvedRun& r) {
  try {
    r.batch = resolve_batch(c, world.world_size);
    r.sampler = sampler_options(c, *r.batch);
  } catch (const Error&) {
  }
}

// Steps per epoch as the trainer's sampler counts them, and that sampler (over the data's lengths, when they are
// known) for the step time. A problem is the batch size's (train.global_batch) or, with a token budget, the
// packing's (data.max_tokens_per_micro_batch).
void resolve_steps_per_epoch(const RunConfig& c, const RunData& data, ResolvedRun& r,
                             std::optional<DistributedBatchSampler>& sampler) {
  const auto& d = c.data;
  if (!r.batch || data.train_examples < 0) return;
  const bool token_budget = d.max_tokens_per_micro_batch > 0;
  const char* key = token_budget ? "data.max_tokens_per_micro_batch" : "train.global_batch";
  if (!data.source_lengths.empty()) {
    try {
      sampler.emplace(data.source_lengths, data.target_lengths, r.sampler);
      r.steps_per_epoch = sampler->steps_per_epoch();
    } catch (const Error& e) {
      r.errors.push_back(msg(key, ": ", e.what()));
      return;
    }
  } else if (!token_budget) {
    r.steps_per_epoch = optimizer_steps_per_epoch(data.train_examples, r.batch->global_batch, d.drop_last);
  } else {
    r.notes.push_back(msg(key, ": steps per epoch depend on the packing of the data"));
    return;
  }
  if (r.steps_per_epoch == 0 && r.errors.empty()) {
    r.errors.push_back(token_budget
                           ? msg(key, ": the training split's ", data.train_examples,
                                 " examples pack into fewer micro-batches than one optimizer step takes (",
                                 r.batch->dp * r.batch->grad_accumulation, ")")
                           : msg(key, ": the training split has ", data.train_examples,
                                 " examples, not one global batch of ", r.batch->global_batch));
  }
}

// The LR plan: total steps, warmup and the scaled LR. With epochs of a dataset not read yet, the LR is known and
// the step count is not; evaluation alone plans one step for its LR and takes none.
void resolve_lr(const RunConfig& c, ResolvedRun& r) {
  if (!r.batch || !r.errors.empty()) return;
  try {
    if (c.train.max_steps > 0 || r.steps_per_epoch > 0 || c.eval.only) {
      RunConfig planned = c;
      if (c.eval.only && c.train.max_steps <= 0 && c.train.epochs <= 0) planned.train.max_steps = 1;
      r.lr = make_lr_plan(planned, *r.batch, r.steps_per_epoch);
      r.total_steps = r.lr->total_steps;
      r.steps_known = r.warmup_known = !c.eval.only;
      r.epochs = r.lr->epochs;
    } else {
      RunConfig planned = c;
      planned.train.epochs = 0;
      planned.train.max_steps = std::max<int64_t>(1, c.lr_schedule.warmup_steps);
      planned.lr_schedule.warmup_ratio = 0;
      r.lr = make_lr_plan(planned, *r.batch, 0);
      r.warmup_known = c.lr_schedule.warmup_ratio == 0;
      r.epochs = c.train.epochs;
    }
  } catch (const Error& e) {
    r.errors.push_back(e.what());
  }
}

// The model shape: model.init_from's config.json (with the model section's settings), a named shape, or the tiny
// model sized to the data's vocabulary. The data's ids must fit its embedding, and TP must divide it.
void resolve_model(const RunConfig& c, const RunData& data, ResolvedRun& r) {
  const int64_t tp = c.parallel.tp;
  try {
    if (!c.model.init_from.empty()) {
      const fs::path config_json = fs::path(init_from_folder(c)) / "config.json";
      std::error_code ec;
      if (fs::is_regular_file(config_json, ec)) {
        ModelConfig model = read_hf_config(config_json.string());
        apply_model_settings(c, model);
        r.model = model;
      } else if (c.model.name != "tiny") {
        r.model = named_model_config(c.model.name);
        r.notes.push_back(msg("model.init_from '", c.model.init_from, "' has no config.json here: planned with "
                              "the shape of model.name ", c.model.name));
      } else {
        r.notes.push_back(msg("model.init_from '", c.model.init_from, "' has no config.json here: model unknown"));
      }
      if (r.model) {
        for (const auto& e : check_tp_divides(*r.model, tp)) r.errors.push_back(e.text());
        if (data.vocab_size > r.model->vocab_size) {
          r.errors.push_back(msg("model.init_from: the data's vocabulary (", data.vocab_size, " ids, ", c.data.dataset,
                                 ") does not fit the model's embedding (vocab_size ", r.model->vocab_size, ")"));
        }
      }
    } else if (c.model.name == "tiny") {
      if (data.vocab_size > 0) r.model = resolve_model_config(c, data.vocab_size);
    } else {
      if (data.vocab_size > 0) {
        r.model = resolve_model_config(c, data.vocab_size);
        const std::string note = unused_embedding_rows_note(c, *r.model, data.vocab_size);
        if (!note.empty()) r.notes.push_back(note);
      } else {  // the data's vocabulary unknown yet: the named shape, with the model section's settings
        ModelConfig model = named_model_config(c.model.name);
        apply_model_settings(c, model);
        r.model = model;
      }
    }
  } catch (const Error& e) {
    r.model_error = e.what();
    r.errors.push_back(e.what());
    r.model.reset();
  }
}

// The steps the prediction is made on: with the data's sampler, the first kStepsPredicted optimizer steps it serves.
constexpr int64_t kStepsPredicted = 32;

// One optimizer step the sampler serves: each replica's micro-batches as the collation pads them, and what the
// trainer counts of it: the model FLOPs and the source and target tokens of its examples, padding not counted.
struct SampledStep {
  std::vector<std::vector<BatchShape>> replicas;  // [dp rank][micro-batch], data/batch_sampler.h's layout
  std::vector<std::vector<bool>> padded;          // the micro-batch has a row shorter than its source length
  double flops = 0.0;
  double tokens = 0.0;
};

std::vector<SampledStep> sampled_steps(const RunConfig& c, const RunData& data, const DistributedBatchSampler& sampler,
                                       const ModelConfig& model, const BatchPlan& batch) {
  const int64_t multiple = padded_length_multiple(c);
  auto padded = [multiple](int64_t length) { return (std::max<int64_t>(length, 1) + multiple - 1) / multiple * multiple; };
  const std::vector<std::vector<int64_t>> micro_batches = sampler.epoch_micro_batches(0, kStepsPredicted);
  const int64_t per_step = batch.dp * batch.grad_accumulation;
  std::vector<SampledStep> steps;
  for (int64_t step = 0; step < kStepsPredicted && (step + 1) * per_step <= static_cast<int64_t>(micro_batches.size()); ++step) {
    SampledStep s;
    std::vector<int64_t> sources, targets;
    for (int64_t replica = 0; replica < batch.dp; ++replica) {
      std::vector<BatchShape> shapes;
      std::vector<bool> with_padding;
      for (int64_t k = 0; k < batch.grad_accumulation; ++k) {
        const std::vector<int64_t>& rows = micro_batches[step * per_step + k * batch.dp + replica];
        BatchShape shape{static_cast<int64_t>(rows.size()), 1, 1};
        for (int64_t i : rows) {
          shape.source_length = std::max(shape.source_length, padded(data.source_lengths[i]));
          shape.target_length = std::max(shape.target_length, padded(data.target_lengths[i]));
          sources.push_back(data.source_lengths[i]);
          targets.push_back(data.target_lengths[i]);
        }
        bool any_shorter = false;
        for (int64_t i : rows) any_shorter = any_shorter || data.source_lengths[i] < shape.source_length;
        shapes.push_back(shape);
        with_padding.push_back(any_shorter);
      }
      s.replicas.push_back(shapes);
      s.padded.push_back(with_padding);
    }
    s.flops = unpadded_training_flops(model, sources, targets);
    for (size_t i = 0; i < sources.size(); ++i) s.tokens += static_cast<double>(sources[i] + targets[i]);
    steps.push_back(std::move(s));
  }
  return steps;
}

// The step time on world.rates, and the FLOPs and tokens of the same step. With the sampler's steps: the median of
// their times, each step the slowest replica's micro-batches; without them: micro-batches padded to the maximum
// lengths (what the memory model plans for), with the FLOPs of that global batch.
void resolve_step_time(const RunWorld& world, const std::vector<SampledStep>& sampled, const MemoryInputs& m,
                       ResolvedRun& r) {
  StepTimeInputs in;
  in.memory = m;
  in.grad_accumulation = r.batch->grad_accumulation;
  in.nodes = world.nodes;
  in.ranks_per_node = world.ranks_per_node;
  try {
    if (sampled.empty()) {
      r.step_time = predict_step_time(*r.model, in, *world.rates);
      return;
    }
    std::vector<std::pair<StepTimePrediction, const SampledStep*>> steps;
    for (const SampledStep& step : sampled) {
      std::optional<StepTimePrediction> slowest;
      for (size_t replica = 0; replica < step.replicas.size(); ++replica) {
        // One padding flag for the replica's micro-batches: padded where any of them is (the kernels of the larger
        // part decide).
        StepTimeInputs replica_in = in;
        replica_in.memory.padded = std::any_of(step.padded[replica].begin(), step.padded[replica].end(),
                                               [](bool p) { return p; });
        const StepTimePrediction p = predict_step_time(*r.model, replica_in, *world.rates, step.replicas[replica]);
        if (!slowest || p.total_s > slowest->total_s) slowest = p;
      }
      steps.emplace_back(*slowest, &step);
    }
    std::sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.first.total_s < b.first.total_s; });
    const auto& median = steps[steps.size() / 2];
    r.step_time = median.first;
    r.flops_per_step = median.second->flops;
    r.tokens_per_step = median.second->tokens;
  } catch (const Error& e) {
    r.notes.push_back(msg("no step time predicted: ", e.what()));
  }
}

// Memory and FLOPs, with the inputs the trainer's step has: one micro-batch padded to the maximum lengths.
void resolve_memory_and_flops(const RunConfig& c, const RunWorld& world, const RunData& data,
                              const std::optional<DistributedBatchSampler>& sampler, ResolvedRun& r) {
  const int64_t tp = c.parallel.tp;
  if (!r.model || !r.batch || tp < 1 || r.batch->dp < 1 || world.world_size % tp != 0) return;
  // ZeRO-2 without ZeRO-1 is the config's own error (parallel.zero2): no second error from the cost model's check.
  if (c.parallel.zero2 && !c.parallel.zero1) return;
  MemoryInputs m;
  m.tp = static_cast<int>(tp);
  m.dp = static_cast<int>(r.batch->dp);
  // auto as the job resolves it on this world's device (a GPU is planned with a 2-byte precision, as both bf16 and
  // fp16 are).
  m.compute_bytes_per_element =
      resolve_precision(c.precision, world.on_gpu, /*gpu_has_bf16=*/true) == RunConfig::Precision::kFp32 ? 4 : 2;
  m.zero1 = c.parallel.zero1;
  m.zero2 = c.parallel.zero2;
  m.offload_optimizer = c.parallel.offload_optimizer;
  m.bucket_bytes = mib_to_bytes(c.parallel.bucket_mib);
  m.adafactor = c.optimizer.name == OptimizerSettings::Name::kAdafactor;
  m.checkpoint_every_blocks = requested_checkpoint_every_blocks(c.parallel);
  m.sequence_parallel = c.parallel.sequence_parallel;
  m.selective_recomputation = requested_selective_recomputation(c.parallel);
  m.micro_batch = planned_micro_batch(c, *r.batch);
  m.on_gpu = world.on_gpu;
  m.fused_attention = world.fused_attention;
  m.half_products_through_fp32 = world.half_products_through_fp32;
  try {
    m.frozen_parameters_per_rank = frozen_parameters_per_rank(*r.model, m.tp, freeze_options(c.train));
    // auto: what the trainer chooses on a device of this memory (none where it is unknown).
    r.checkpointing = resolve_activation_checkpointing(*r.model, m, world.device_share_bytes);
    m.checkpoint_every_blocks = r.checkpointing.checkpoint_every_blocks;
    m.selective_recomputation = r.checkpointing.selective_recomputation;
    r.memory_inputs = m;
    // One global batch at the planned lengths; with the data's steps, the FLOPs of the step the time is for.
    r.flops_per_step =
        training_flops(*r.model, m.micro_batch) * static_cast<double>(r.batch->grad_accumulation * r.batch->dp);
  } catch (const Error& e) {
    r.errors.push_back(e.what());
    return;
  }
  std::vector<SampledStep> sampled;
  if (sampler && r.steps_per_epoch > 0) sampled = sampled_steps(c, data, *sampler, *r.model, *r.batch);
  if (!sampled.empty()) {
    // Without rates, the FLOPs and tokens of the step of median FLOPs (with rates, resolve_step_time's median step
    // replaces them).
    std::vector<const SampledStep*> by_flops;
    for (const SampledStep& s : sampled) by_flops.push_back(&s);
    std::sort(by_flops.begin(), by_flops.end(), [](const SampledStep* a, const SampledStep* b) { return a->flops < b->flops; });
    r.flops_per_step = by_flops[by_flops.size() / 2]->flops;
    r.tokens_per_step = by_flops[by_flops.size() / 2]->tokens;
  }
  if (world.rates) resolve_step_time(world, sampled, m, r);
}

}  // namespace

BatchSamplerOptions sampler_options(const RunConfig& c, const BatchPlan& batch) {
  const auto& d = c.data;
  BatchSamplerOptions o;
  o.global_batch = batch.global_batch;
  o.micro_batches = batch.grad_accumulation;
  o.dp_rank = 0;
  o.dp_size = batch.dp;
  o.seed = static_cast<uint64_t>(c.run.seed);
  o.order = d.sampling;
  o.sortish_factor = d.sortish_factor;
  o.drop_last = d.drop_last;
  o.max_tokens_per_micro_batch = d.max_tokens_per_micro_batch;
  o.length_multiple = padded_length_multiple(c);
  return o;
}

BatchShape planned_micro_batch(const RunConfig& c, const BatchPlan& batch) {
  // The longest batch the collation can make: the maximum lengths padded up to the length multiple.
  const int64_t multiple = padded_length_multiple(c);
  auto padded = [multiple](int64_t length) { return (length + multiple - 1) / multiple * multiple; };
  return BatchShape{batch.micro_batch > 0 ? batch.micro_batch : 1,
                    padded(c.data.max_source_length > 0 ? c.data.max_source_length : 512),
                    padded(c.data.max_target_length > 0 ? c.data.max_target_length : 128)};
}

ResolvedRun resolve_run(const RunConfig& config, const RunWorld& world, const RunData& data) {
  ResolvedRun run;
  run.train_examples = data.train_examples;
  resolve_batch_split(config, world, run);
  std::optional<DistributedBatchSampler> sampler;  // over the data's lengths, when they are known
  resolve_steps_per_epoch(config, data, run, sampler);
  run.eval_every_steps = evaluation_interval_steps(config.eval, run.steps_per_epoch);
  resolve_lr(config, run);
  resolve_model(config, data, run);
  resolve_memory_and_flops(config, world, data, sampler, run);
  return run;
}

}  // namespace t5scale
