// The distributed batch sampler: which examples each data-parallel replica trains on, step by step.
//
// Every epoch has one order of all examples, computed from (seed, epoch) alone: random, sortish (length-grouped,
// see below) or sequential. The order is cut into micro-batches — of a fixed size, or packed up to a token
// budget — and each optimizer step takes dp_size x micro_batches consecutive micro-batches of it. They go to the
// replicas round-robin: micro-batch j (0 .. micro_batches-1) of replica r in step s is the epoch's micro-batch
//     s * dp_size * micro_batches + j * dp_size + r,
// as Hugging Face's Trainer distributes batches under accelerate. Hence:
//   - the batches depend on dp_rank only, never on the TP rank: every TP rank of a replica gets the same;
//   - replicas get disjoint examples, and a step's examples are the same for every grid with the same
//     dp_size x micro_batches (fixed-size mode: the same global batch), so the grid changes nothing but speed;
//   - with sortish order, the j-th micro-batches of all replicas are neighbours in the sorted order: replicas
//     hold similar lengths and reach the gradient reduction together.
// The last incomplete step of an epoch is dropped (drop_last) or completed by wrapping around to the start of
// the epoch's order, as torch's DistributedSampler pads (repeats, never a short step).
//
// Sortish order follows Hugging Face's LengthGroupedSampler (transformers/trainer_pt_utils.py,
// get_length_grouped_indices): a random permutation cut into megabatches, each sorted by length, longest first,
// and the longest example of the epoch moved to the very front so that an out-of-memory error shows at step 0. It
// differs in: (1) a megabatch holds sortish_factor optimizer steps of examples (fixed size: factor x global
// batch; token budget: factor x dp_size x micro_batches x max_tokens tokens, counted as max(source, target)
// length), where Hugging Face uses factor x per-device batch x accumulation, so our order does not change with
// dp_size; (2) the length is the source length, ties broken by the target length, then by the permutation;
// (3) after the longest example is swapped to the front (as Hugging Face does), the megabatch it came from is
// sorted again, so every megabatch stays sorted. Like the current transformers sampler and unlike the legacy
// examples/seq2seq SortishSampler (fastai's), batches are not shuffled after sorting.
//
// Token-budget mode (max_tokens_per_micro_batch > 0) packs the epoch's order greedily: an example joins the
// current micro-batch while count x longest source and count x longest target, as padded (lengths rounded up to
// length_multiple), both stay within the budget — fairseq's max_tokens rule. The global batch then varies from
// step to step; steps per epoch = floor(micro-batches / (dp_size x micro_batches)) with drop_last, else the ceiling
// with the last step completed by packing on from the start of the order.
//
// Randomness is a splitmix64 stream with our own bounded draws and Fisher-Yates shuffle, so the order is the same
// on every compiler and standard library (std::shuffle's is not), which resuming on another machine needs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "config/run_config.h"

namespace t5scale {

// The config's own enum (data.sampling): the sampler takes it as it is.
using SamplingOrder = DataSettings::Sampling;
// "random" | "sortish" | "sequential"; anything else is an error naming data.sampling and the choices.
SamplingOrder parse_sampling_order(const std::string& name);
std::string sampling_order_name(SamplingOrder order);

struct BatchSamplerOptions {
  int64_t global_batch = 16;  // examples per optimizer step over all replicas (fixed-size mode)
  int64_t micro_batches = 1;  // micro-batches per replica per step (gradient accumulation)
  int64_t dp_rank = 0;
  int64_t dp_size = 1;
  uint64_t seed = 1234;
  SamplingOrder order = SamplingOrder::kRandom;
  int64_t sortish_factor = 50;  // optimizer steps per sortish megabatch
  bool drop_last = true;        // false: pad the last step by wrapping to the start of the epoch's order
  int64_t max_tokens_per_micro_batch = 0;  // > 0: token-budget mode (global_batch is then not used)
  int64_t length_multiple = 1;  // token budget: lengths counted rounded up to this (collation's pad_to_multiple_of)
};

// Where the sampler stands: the next step it serves is step `step_in_epoch` of epoch `epoch`.
struct SamplerPosition {
  int64_t epoch = 0;
  int64_t step_in_epoch = 0;
  bool operator==(const SamplerPosition& other) const {
    return epoch == other.epoch && step_in_epoch == other.step_in_epoch;
  }
};
// {"epoch": 3, "step_in_epoch": 17}; from_json names a missing or negative field.
void to_json(nlohmann::json& json, const SamplerPosition& position);
void from_json(const nlohmann::json& json, SamplerPosition& position);

// Planning an epoch costs a shuffle and, for sortish order, a sort of every megabatch (about 2 s for 10 million
// examples); steps are then cheap. Not thread-safe: one thread (the trainer's, or a loader's) owns a sampler.
class DistributedBatchSampler {
 public:
  // source_lengths[i], target_lengths[i]: the token counts of example i (the dataset reader has them). Every
  // bad option is an error naming the option; in token-budget mode so is an example longer than the budget.
  DistributedBatchSampler(std::vector<int64_t> source_lengths, std::vector<int64_t> target_lengths,
                          BatchSamplerOptions options);

  // This replica's micro-batches for the next step (example indices), then advances; crosses into the next
  // epoch after its last step.
  std::vector<std::vector<int64_t>> next_step();

  // Steps in the current epoch (fixed-size mode: the same every epoch; token budget: may vary with the epoch,
  // and asking about another epoch plans it).
  int64_t steps_per_epoch() const;
  int64_t steps_in_epoch(int64_t epoch) const;

  SamplerPosition position() const { return position_; }
  // Continue from a saved position: the steps that follow are those an uninterrupted sampler would serve.
  void restore(const SamplerPosition& position);
  // epoch + step_in_epoch / steps_per_epoch, for logging.
  double epoch_fraction() const;

  // Every micro-batch of an epoch over all replicas, in the epoch's order (steps x dp_size x micro_batches of
  // them, the step-major layout described above); with max_steps >= 0 those of its first max_steps steps only (the
  // planner's few steps of a dataset of millions of examples, without a list of every micro-batch).
  std::vector<std::vector<int64_t>> epoch_micro_batches(int64_t epoch, int64_t max_steps = -1) const;
  // The order of all examples for an epoch (before cutting into micro-batches).
  std::vector<int64_t> epoch_order(int64_t epoch) const;

  // Fixed-size mode: global_batch / (dp_size x micro_batches); 0 in token-budget mode.
  int64_t micro_batch_size() const { return micro_batch_size_; }
  int64_t num_examples() const { return static_cast<int64_t>(source_lengths_.size()); }
  const BatchSamplerOptions& options() const { return options_; }

 private:
  // One epoch cut into micro-batches: micro-batch k is positions [starts[k], starts[k + 1]) of the order repeated
  // (position p is order[p % n]); starts has micro-batch count + 1 entries.
  struct EpochPlan {
    int64_t epoch = -1;
    std::vector<int64_t> order;
    std::vector<int64_t> starts;
    int64_t steps = 0;
  };
  EpochPlan plan_epoch(int64_t epoch) const;
  const EpochPlan& plan_for(int64_t epoch) const;
  std::vector<int64_t> micro_batch(const EpochPlan& plan, int64_t index) const;
  std::vector<int64_t> sortish_order(uint64_t stream_seed) const;
  std::vector<int64_t> pack_by_tokens(const std::vector<int64_t>& order) const;
  int64_t padded_length(int64_t length) const;

  std::vector<int64_t> source_lengths_, target_lengths_;
  BatchSamplerOptions options_;
  int64_t micro_batch_size_ = 0;
  SamplerPosition position_;
  mutable EpochPlan plan_;  // the last epoch planned (the current one, usually)
};

}  // namespace t5scale
