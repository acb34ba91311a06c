#include "train/parallel_trainer.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>

#include "core/check.h"
#include "core/fnv1a.h"
#include "core/units.h"
#include "dist/cuda_backend.h"
#include "model/vocab_parallel_cross_entropy.h"
#include "train/cpu_memory_tracker.h"

namespace t5scale {

ParallelTrainingOptions training_options_for(const RunConfig& config) {
  ParallelTrainingOptions options;
  const auto& o = config.optimizer;
  options.optimizer = o.name == OptimizerSettings::Name::kAdafactor ? OptimizerKind::kAdafactor : OptimizerKind::kAdamW;
  options.adamw.beta1 = o.beta1;
  options.adamw.beta2 = o.beta2;
  options.adamw.eps = o.eps;
  options.adamw.weight_decay = o.weight_decay;
  options.adamw.fused = o.fused;
  options.adafactor.relative_step = o.adafactor_relative_step;
  options.adafactor.scale_parameter = o.adafactor_scale_parameter;
  options.adafactor.warmup_init = o.adafactor_warmup_init;
  options.adafactor.decay_rate = o.adafactor_decay_rate;
  options.adafactor.clip_threshold = o.adafactor_clip_threshold;
  options.adafactor.beta1 = o.adafactor_beta1;
  options.adafactor.eps1 = o.adafactor_eps1;
  options.adafactor.eps2 = o.adafactor_eps2;
  options.adafactor.weight_decay = o.weight_decay;
  options.freeze = freeze_options(config.train);
  options.max_grad_norm = config.train.max_grad_norm;
  options.zero1 = config.parallel.zero1;
  options.zero2 = config.parallel.zero2;
  options.offload_optimizer = config.parallel.offload_optimizer;
  options.bucket_bytes = mib_to_bytes(config.parallel.bucket_mib);
  options.precision = config.precision;
  return options;
}

torch::ScalarType compute_dtype(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return torch::kFloat32;
    case Precision::kBf16: return torch::kBFloat16;
    case Precision::kFp16: return torch::kHalf;
    case Precision::kAuto: break;
  }
  throw Error("precision auto reached the model unresolved (resolve_precision chooses it on the job's device)");
}

std::vector<Seq2SeqBatch> replica_micro_batches(const Seq2SeqBatch& global, const ProcessGrid& grid,
                                                int64_t micro_batches) {
  const int64_t rows = global.input_ids.size(0);
  T5S_CHECK(micro_batches >= 1 && rows % (grid.dp_size * micro_batches) == 0, "a global batch of ", rows,
            " sequences does not split into dp ", grid.dp_size, " x ", micro_batches, " micro-batches");
  const int64_t per_replica = rows / grid.dp_size, per_micro = per_replica / micro_batches;
  std::vector<Seq2SeqBatch> out;
  for (int64_t m = 0; m < micro_batches; ++m) {
    const int64_t begin = grid.dp_rank * per_replica + m * per_micro;
    out.push_back({global.input_ids.narrow(0, begin, per_micro), global.attention_mask.narrow(0, begin, per_micro),
                   global.labels.narrow(0, begin, per_micro)});
  }
  return out;
}

ParallelTrainer::ParallelTrainer(T5Model model, ProcessGrid grid, ParallelTrainingOptions options)
    : model_(std::move(model)), grid_(std::move(grid)), options_(options) {
  T5S_CHECK(&model_->tp() == grid_.tp.get(), "the model must be built over the grid's TP group");
  auto params = model_->named_parameters();
  const std::vector<ParameterLayout> layouts = model_->parameter_layouts();
  std::vector<std::string> names;
  for (const ParameterLayout& layout : layouts) names.push_back(layout.name);
  for (const std::string& name : frozen_parameter_names(names, options_.freeze)) params[name].set_requires_grad(false);

  std::vector<ParameterSlot> slots;
  for (const ParameterLayout& layout : layouts) {
    torch::Tensor param = params[layout.name];
    if (!param.requires_grad()) {
      frozen_.push_back(layout.name);
      continue;
    }
    ParameterSlot slot;
    slot.name = layout.name;
    slot.param = param;
    slot.layout = layout;
    slot.weight_decay = weight_decay_applies(layout.name);
    slots.push_back(std::move(slot));
  }
  T5S_CHECK(!slots.empty(), "every parameter is frozen: nothing to train");
  T5S_CHECK(!options_.zero2 || options_.zero1, "ZeRO-2 shards the gradients on top of ZeRO-1's optimizer state: "
            "zero2 needs zero1");
  const GradientSharding sharding = options_.zero2   ? GradientSharding::kGradients
                                    : options_.zero1 ? GradientSharding::kOptimizer
                                                     : GradientSharding::kNone;
  gradients_ = std::make_unique<GradientBuckets>(std::move(slots), grid_.dp, options_.bucket_bytes, sharding);
  std::map<std::string, size_t> slot_of;  // the trainable parameters' gradient slots by name
  for (size_t k = 0; k < gradients_->slots().size(); ++k) slot_of[gradients_->slots()[k].name] = k;
  if (options_.weight_gradients_into_buckets) {
    for (const auto& item : model_->named_modules()) {
      WeightGradientSink* sink = nullptr;
      if (auto* column = item.value()->as<ColumnParallelLinearImpl>()) sink = &column->weight_gradient_sink;
      if (auto* row = item.value()->as<RowParallelLinearImpl>()) sink = &row->weight_gradient_sink;
      const auto found = slot_of.find(item.key() + ".weight");
      if (sink == nullptr || found == slot_of.end()) continue;  // frozen weights keep no bucket
      *sink = gradients_->weight_gradient_sink(found->second);
      installed_sinks_.push_back(sink);
    }
  }
  for (const auto& item : model_->named_modules()) {
    auto* norm = item.value()->as<RMSNormImpl>();
    if (norm == nullptr) continue;
    norm->sum_weight_grad_over_tp = false;
    norms_.push_back(norm);
    const auto found = slot_of.find(item.key() + ".weight");
    if (found != slot_of.end()) norm_slots_.push_back(found->second);  // a frozen norm has no gradient to sum
  }
  if (grid_.tp_size > 1) {
    // The coalesced sum adds the same elements on every TP rank: the norms' slots must lie at the same places of
    // equal buckets (true when every rank holds equal shards; checked once here rather than trusted). A digest of
    // the places, in halves that a double holds exactly, compared by its largest and smallest over the group.
    std::vector<int64_t> places;  // (bucket, offset, numel, bucket elements) per slot
    for (const size_t k : norm_slots_) {
      const ParameterSlot& slot = gradients_->slots()[k];
      places.insert(places.end(), {static_cast<int64_t>(slot.bucket), slot.offset, slot.numel,
                                   gradients_->buckets()[slot.bucket].elements});
    }
    const uint64_t digest =
        fnv1a_64({reinterpret_cast<const char*>(places.data()), places.size() * sizeof(int64_t)});
    const auto device_doubles = torch::TensorOptions().dtype(torch::kFloat64).device(model_->shared->weight.device());
    const double high = static_cast<double>(digest >> 32), low = static_cast<double>(digest & 0xffffffffULL);
    const torch::Tensor mine = torch::tensor({static_cast<double>(norm_slots_.size()), high, low}, device_doubles);
    torch::Tensor largest = mine.clone(), negated_smallest = -mine;
    grid_.tp->all_reduce_max(largest);
    grid_.tp->all_reduce_max(negated_smallest);
    T5S_CHECK(torch::equal(largest, mine) && torch::equal(-negated_smallest, mine),
              "the norms' gradient slots differ between the ranks of the TP group (tp rank ", grid_.tp_rank,
              "): their gradients cannot be summed in one all-reduce");
  }
  switch (options_.optimizer) {
    case OptimizerKind::kAdamW:
      optimizer_ = std::make_unique<DistributedAdamW>(*gradients_, grid_, options_.adamw, options_.offload_optimizer);
      break;
    case OptimizerKind::kAdafactor:
      optimizer_ = std::make_unique<DistributedAdafactor>(*gradients_, grid_, options_.adafactor,
                                                          options_.offload_optimizer);
      break;
  }
  loss_scale_ = options_.precision == Precision::kFp16 ? options_.initial_loss_scale : 1.0;
}

ParallelTrainer::~ParallelTrainer() {
  for (WeightGradientSink* sink : installed_sinks_) *sink = nullptr;
  for (RMSNormImpl* norm : norms_) norm->sum_weight_grad_over_tp = true;
}

void ParallelTrainer::sum_norm_gradients_over_tp() {
  // This rank's owned elements of every norm's reduced gradient (all of it without ZeRO, the DP shard's share with
  // it), gathered into one buffer, summed over TP, and put back.
  // With the optimizer offloaded, the host copies made as the buckets were reduced take the sums again.
  struct Part {
    size_t bucket;
    int64_t begin;  // in the owned range
    torch::Tensor view;
  };
  std::vector<Part> parts;
  for (const size_t k : norm_slots_) {
    const ParameterSlot& slot = gradients_->slots()[k];
    const auto [begin, end] = gradients_->owned_range(slot.bucket);
    const int64_t first = std::max(begin, slot.offset), last = std::min(end, slot.offset + slot.numel);
    if (first < last) {
      parts.push_back({slot.bucket, first - begin,
                       gradients_->owned_grad(slot.bucket).narrow(0, first - begin, last - first)});
    }
  }
  if (parts.empty()) return;
  std::vector<torch::Tensor> views;
  for (const Part& part : parts) views.push_back(part.view);
  torch::Tensor flat = torch::cat(views);
  grid_.tp->all_reduce_sum(flat);
  int64_t at = 0;
  for (Part& part : parts) {
    part.view.copy_(flat.narrow(0, at, part.view.numel()));
    at += part.view.numel();
    gradients_->refresh_host_copy(part.bucket, part.begin, part.view.numel());
  }
}

void ParallelTrainer::set_loss_scale_state(double loss_scale, int64_t steps_since_overflow) {
  T5S_CHECK(loss_scale > 0.0 && std::isfinite(loss_scale), "the loss scale must be positive, got ", loss_scale);
  T5S_CHECK(steps_since_overflow >= 0, "steps since the last overflow must be >= 0, got ", steps_since_overflow);
  loss_scale_ = loss_scale;
  steps_since_overflow_ = steps_since_overflow;
}

namespace {

enum Phase { kForward, kBackward, kCommExposed, kOptimizer, kPhaseCount };

// Charges the time since the previous boundary to a phase. On a GPU the boundaries are CUDA events on the compute
// stream (not the communication stream, whose reductions overlap backward), read after the step's one host
// synchronisation, so timing adds no synchronisation of its own; elsewhere they are host clock readings.
class PhaseClock {
 public:
  explicit PhaseClock(torch::Device device) {
    if (device.is_cuda()) stream_clock_ = required_cuda_backend("a step on a GPU").stream_clock(device.index());
    peak_bytes_.fill(-1);
    if (CpuMemoryTracker::installed()) CpuMemoryTracker::start_window();
    mark();
  }

  void end(Phase phase) {
    mark();
    phases_.push_back(phase);
    if (CpuMemoryTracker::installed()) {
      peak_bytes_[phase] = std::max(peak_bytes_[phase], CpuMemoryTracker::window_peak_bytes());
      CpuMemoryTracker::start_window();
    }
  }

  // The CPU's peak of live tensor bytes per phase (CpuMemoryTracker, when it is installed; else -1).
  const std::array<int64_t, kPhaseCount>& peak_bytes() const { return peak_bytes_; }

  // Seconds per phase, summed over micro-batches. On a GPU: after the work up to the last end() has finished.
  std::array<double, kPhaseCount> seconds() const {
    std::array<double, kPhaseCount> out{};
    for (size_t i = 0; i < phases_.size(); ++i) {
      out[phases_[i]] += stream_clock_ ? stream_clock_->seconds_between(i, i + 1)
                                       : std::chrono::duration<double>(times_[i + 1] - times_[i]).count();
    }
    return out;
  }

 private:
  void mark() {
    if (stream_clock_) {
      stream_clock_->mark();
    } else {
      times_.push_back(std::chrono::steady_clock::now());
    }
  }

  std::unique_ptr<CudaStreamClock> stream_clock_;  // on a GPU
  std::vector<Phase> phases_;
  std::array<int64_t, kPhaseCount> peak_bytes_{};
  std::vector<std::chrono::steady_clock::time_point> times_;  // elsewhere
};

}  // namespace

StepResult ParallelTrainer::step(const std::vector<Seq2SeqBatch>& micro_batches, double learning_rate) {
  T5S_CHECK(!micro_batches.empty(), "a step needs at least one micro-batch");
  model_->train();
  const torch::Device device = model_->shared->weight.device();
  const auto count_options = torch::TensorOptions().dtype(torch::kFloat64).device(device);

  // 1. Every micro-batch goes to the device before the first forward: input ids, the decoder's inputs (shifted on the
  //    host), the labels, and the mask only where something is padded (read on the host: no device wait). From
  //    page-locked host memory (the job's loader pins it on a GPU node) the copies run asynchronously, in order on
  //    the compute stream.
  struct DeviceBatch {
    torch::Tensor input_ids, attention_mask, decoder_input_ids, labels;
  };
  std::vector<DeviceBatch> batches;
  int64_t tokens = 0;  // this replica's target tokens
  for (const Seq2SeqBatch& batch : micro_batches) {
    T5S_CHECK(batch.input_ids.is_cpu() && batch.attention_mask.is_cpu() && batch.labels.is_cpu(),
              "the trainer takes micro-batches on the host, as the data loader gives them, and copies them itself");
    tokens += (batch.labels != kIgnoreIndex).sum().item<int64_t>();
    auto to_device = [&](const torch::Tensor& t) { return t.to(device, /*non_blocking=*/true); };
    const bool padded = !batch.attention_mask.all().item<bool>();
    torch::Tensor decoder_input_ids = model_->shift_right(batch.labels);
    if (batch.labels.is_pinned()) decoder_input_ids = decoder_input_ids.pin_memory();  // its copy runs async too
    batches.push_back({to_device(batch.input_ids), padded ? to_device(batch.attention_mask) : torch::Tensor(),
                       to_device(decoder_input_ids), to_device(batch.labels)});
  }

  // 2. The global number of target tokens: the denominator of the mean loss on every rank. It stays on the
  //    device; the step reads its figures back to the host once, at the end.
  torch::Tensor global_tokens = torch::full({1}, static_cast<double>(tokens), count_options);
  grid_.dp->all_reduce_sum(global_tokens);
  const torch::Tensor loss_factor = loss_scale_ / global_tokens.clamp_min(1.0);

  StepResult result;
  PhaseClock clock(device);
  // 3. Forward and backward per micro-batch; the DP reduction starts during the last backward.
  gradients_->begin_step();
  torch::Tensor loss_sum = torch::zeros({1}, count_options);
  for (size_t i = 0; i < batches.size(); ++i) {
    const DeviceBatch& batch = batches[i];
    gradients_->begin_micro_batch(i + 1 == batches.size());
    const torch::Tensor logits = model_->forward(batch.input_ids, batch.attention_mask, batch.decoder_input_ids);
    const torch::Tensor summed = model_->token_losses(logits, batch.labels).sum();
    clock.end(kForward);
    (summed * loss_factor.to(summed.scalar_type())).backward();
    loss_sum += summed.detach().to(torch::kFloat64);
    clock.end(kBackward);
  }
  // 4. Gradients reduced over DP; under sequence parallelism the norms' parts summed over TP.
  gradients_->finish();
  if (model_->sequence_parallel() && grid_.tp_size > 1) sum_norm_gradients_over_tp();
  grid_.dp->all_reduce_sum(loss_sum);
  clock.end(kCommExposed);

  // 5. Overflow check (fp16), norm, clipping and the update.
  GradientScaling scaling;
  scaling.loss_scale = loss_scale_;
  scaling.max_grad_norm = options_.max_grad_norm;
  scaling.skip_non_finite = options_.precision == Precision::kFp16;
  const StepOutcome outcome = optimizer_->step(learning_rate, scaling);
  clock.end(kOptimizer);

  // The step's one read-back: loss, token count and gradient norm together.
  const torch::Tensor figures =
      torch::cat({loss_sum, global_tokens, outcome.grad_norm.reshape({1})}).to(torch::kCPU);
  const double token_count = std::max(figures[1].item<double>(), 1.0);
  result.loss = figures[0].item<double>() / token_count;
  result.target_tokens = static_cast<int64_t>(token_count);
  result.grad_norm = figures[2].item<double>();
  result.loss_scale = loss_scale_;
  result.lr = outcome.learning_rate;
  const auto phase_s = clock.seconds();
  result.forward_time_s = phase_s[kForward];
  result.backward_time_s = phase_s[kBackward];
  result.comm_exposed_time_s = phase_s[kCommExposed];
  result.optimizer_time_s = phase_s[kOptimizer];
  const auto& peaks = clock.peak_bytes();
  result.forward_peak_bytes = peaks[kForward];
  result.backward_peak_bytes = peaks[kBackward];
  result.optimizer_peak_bytes = std::max(peaks[kCommExposed], peaks[kOptimizer]);
  if (outcome.skipped) {
    loss_scale_ *= 0.5;
    steps_since_overflow_ = 0;
    result.skipped = true;
    return result;
  }
  if (options_.precision == Precision::kFp16 && ++steps_since_overflow_ % options_.loss_scale_growth_interval == 0) {
    loss_scale_ *= 2.0;
  }
  return result;
}

}  // namespace t5scale
