#include "data/batch_sampler.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/check.h"

namespace t5scale {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): the finaliser mixes a seed into a well-spread 64-bit value.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix64(state_ += 0x9E3779B97F4A7C15ULL); }
  // Uniform in [0, bound) without modulo bias: reject the few draws below 2^64 mod bound.
  uint64_t below(uint64_t bound) {
    const uint64_t threshold = (0 - bound) % bound;
    for (;;) {
      const uint64_t r = next();
      if (r >= threshold) return r % bound;
    }
  }

 private:
  uint64_t state_;
};

uint64_t epoch_stream_seed(uint64_t seed, int64_t epoch) {
  return mix64(mix64(seed) + static_cast<uint64_t>(epoch));
}

void shuffle(std::vector<int64_t>& values, SplitMix64& rng) {
  for (size_t i = values.size(); i > 1; --i) {
    std::swap(values[i - 1], values[rng.below(i)]);
  }
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> values(static_cast<size_t>(n));
  std::iota(values.begin(), values.end(), int64_t{0});
  return values;
}

}  // namespace

SamplingOrder parse_sampling_order(const std::string& name) {
  if (name == "random") return SamplingOrder::kRandom;
  if (name == "sortish") return SamplingOrder::kSortish;
  if (name == "sequential") return SamplingOrder::kSequential;
  throw Error(msg("data.sampling: unknown order '", name, "' (choices: random, sortish, sequential)"));
}

std::string sampling_order_name(SamplingOrder order) {
  switch (order) {
    case SamplingOrder::kRandom:
      return "random";
    case SamplingOrder::kSortish:
      return "sortish";
    case SamplingOrder::kSequential:
      return "sequential";
  }
  return "unknown";
}

void to_json(nlohmann::json& json, const SamplerPosition& position) {
  json = nlohmann::json{{"epoch", position.epoch}, {"step_in_epoch", position.step_in_epoch}};
}

void from_json(const nlohmann::json& json, SamplerPosition& position) {
  T5S_CHECK(json.is_object(), "sampler position: expected a JSON object, got ", json.dump());
  for (const char* field : {"epoch", "step_in_epoch"}) {
    T5S_CHECK(json.contains(field), "sampler position: missing field '", field, "' in ", json.dump());
    T5S_CHECK(json.at(field).is_number_integer() && json.at(field).get<int64_t>() >= 0, "sampler position: field '",
              field, "' must be an integer >= 0, got ", json.at(field).dump());
  }
  position.epoch = json.at("epoch").get<int64_t>();
  position.step_in_epoch = json.at("step_in_epoch").get<int64_t>();
}

DistributedBatchSampler::DistributedBatchSampler(std::vector<int64_t> source_lengths,
                                                 std::vector<int64_t> target_lengths, BatchSamplerOptions options)
    : source_lengths_(std::move(source_lengths)), target_lengths_(std::move(target_lengths)), options_(options) {
  const BatchSamplerOptions& o = options_;
  T5S_CHECK(source_lengths_.size() == target_lengths_.size(), "batch sampler: source_lengths has ",
            source_lengths_.size(), " entries but target_lengths has ", target_lengths_.size());
  T5S_CHECK(!source_lengths_.empty(), "batch sampler: the dataset has no examples");
  T5S_CHECK(o.dp_size > 0, "batch sampler: dp_size must be > 0, got ", o.dp_size);
  T5S_CHECK(o.dp_rank >= 0 && o.dp_rank < o.dp_size, "batch sampler: dp_rank ", o.dp_rank,
            " is outside [0, dp_size ", o.dp_size, ")");
  T5S_CHECK(o.micro_batches > 0, "batch sampler: micro_batches must be > 0, got ", o.micro_batches);
  T5S_CHECK(o.sortish_factor > 0, "batch sampler: sortish_factor must be > 0, got ", o.sortish_factor);
  T5S_CHECK(o.max_tokens_per_micro_batch >= 0, "batch sampler: max_tokens_per_micro_batch must be >= 0 (0: fixed-size ",
            "batches), got ", o.max_tokens_per_micro_batch);
  T5S_CHECK(o.length_multiple >= 0, "batch sampler: length_multiple must be >= 0, got ", o.length_multiple);
  for (size_t i = 0; i < source_lengths_.size(); ++i) {
    // Every stored sequence ends with eos, so an empty one means the lengths are wrong.
    T5S_CHECK(source_lengths_[i] > 0 && target_lengths_[i] > 0, "batch sampler: example ", i, " has source length ",
              source_lengths_[i], " and target length ", target_lengths_[i], "; both must be > 0");
  }

  if (o.max_tokens_per_micro_batch == 0) {
    T5S_CHECK(o.global_batch > 0, "batch sampler: global_batch must be > 0, got ", o.global_batch);
    T5S_CHECK(o.global_batch % (o.dp_size * o.micro_batches) == 0, "batch sampler: global_batch ", o.global_batch,
              " is not divisible by dp_size ", o.dp_size, " x micro_batches ", o.micro_batches);
    micro_batch_size_ = o.global_batch / (o.dp_size * o.micro_batches);
    T5S_CHECK(!o.drop_last || num_examples() >= o.global_batch, "batch sampler: the dataset's ", num_examples(),
              " examples hold no complete global_batch of ", o.global_batch, " (drop_last)");
  } else {
    const int64_t budget = o.max_tokens_per_micro_batch;
    int64_t too_long = 0, first = -1;
    for (int64_t i = 0; i < num_examples(); ++i) {
      if (padded_length(source_lengths_[i]) > budget || padded_length(target_lengths_[i]) > budget) {
        if (too_long++ == 0) first = i;
      }
    }
    T5S_CHECK(too_long == 0, "batch sampler: example ", first, " (source ", source_lengths_[first],
              " tokens, target ", target_lengths_[first], " tokens",
              o.length_multiple > 1 ? msg(", padded to a multiple of ", o.length_multiple) : std::string(),
              ") does not fit max_tokens_per_micro_batch ", budget, " on its own",
              too_long > 1 ? msg(", nor do ", too_long - 1, " more examples") : std::string(),
              "; raise the budget or truncate the dataset");
    plan_for(0);  // an epoch too small for one step is an error now rather than at the first step
  }
}

int64_t DistributedBatchSampler::padded_length(int64_t length) const {
  const int64_t multiple = std::max<int64_t>(options_.length_multiple, 1);
  return (length + multiple - 1) / multiple * multiple;
}

std::vector<int64_t> DistributedBatchSampler::epoch_order(int64_t epoch) const {
  T5S_CHECK(epoch >= 0, "batch sampler: epoch must be >= 0, got ", epoch);
  switch (options_.order) {
    case SamplingOrder::kSequential:
      return iota(num_examples());
    case SamplingOrder::kRandom: {
      std::vector<int64_t> order = iota(num_examples());
      SplitMix64 rng(epoch_stream_seed(options_.seed, epoch));
      shuffle(order, rng);
      return order;
    }
    case SamplingOrder::kSortish:
      return sortish_order(epoch_stream_seed(options_.seed, epoch));
  }
  return {};
}

std::vector<int64_t> DistributedBatchSampler::sortish_order(uint64_t stream_seed) const {
  std::vector<int64_t> order = iota(num_examples());
  SplitMix64 rng(stream_seed);
  shuffle(order, rng);

  // Megabatch boundaries over the permutation: sortish_factor optimizer steps' worth of examples.
  std::vector<size_t> bounds = {0};
  if (options_.max_tokens_per_micro_batch == 0) {
    const size_t size = static_cast<size_t>(options_.sortish_factor * options_.global_batch);
    for (size_t end = size; end < order.size(); end += size) bounds.push_back(end);
  } else {
    const int64_t limit =
        options_.sortish_factor * options_.dp_size * options_.micro_batches * options_.max_tokens_per_micro_batch;
    int64_t tokens = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      const int64_t e = order[i];
      tokens += std::max(padded_length(source_lengths_[e]), padded_length(target_lengths_[e]));
      if (tokens >= limit && i + 1 < order.size()) {
        bounds.push_back(i + 1);
        tokens = 0;
      }
    }
  }
  bounds.push_back(order.size());

  // Longest first: source length, then target length; stable, so ties keep the permutation's order.
  const auto longer = [this](int64_t a, int64_t b) {
    if (source_lengths_[a] != source_lengths_[b]) return source_lengths_[a] > source_lengths_[b];
    return target_lengths_[a] > target_lengths_[b];
  };
  const auto sort_megabatch = [&](size_t m) {
    std::stable_sort(order.begin() + bounds[m], order.begin() + bounds[m + 1], longer);
  };
  const size_t megabatches = bounds.size() - 1;
  size_t longest = 0;
  for (size_t m = 0; m < megabatches; ++m) {
    sort_megabatch(m);
    if (longer(order[bounds[m]], order[bounds[longest]])) longest = m;
  }
  // The longest example of the epoch to the front of the first megabatch, so that the first step is the most
  // demanding one; the megabatch it came from is sorted again.
  if (longest != 0) {
    std::swap(order[0], order[bounds[longest]]);
    sort_megabatch(longest);
  }
  return order;
}

std::vector<int64_t> DistributedBatchSampler::pack_by_tokens(const std::vector<int64_t>& order) const {
  const int64_t budget = options_.max_tokens_per_micro_batch;
  const int64_t per_step = options_.dp_size * options_.micro_batches;
  const int64_t n = static_cast<int64_t>(order.size());
  std::vector<int64_t> starts = {0};
  int64_t count = 0, longest_source = 0, longest_target = 0;
  // Adds the example at position p to the open micro-batch if it fits; the constructor checked that every
  // example fits alone, so an empty micro-batch always takes it.
  const auto try_add = [&](int64_t p) {
    const int64_t e = order[p % n];
    const int64_t source = std::max(longest_source, padded_length(source_lengths_[e]));
    const int64_t target = std::max(longest_target, padded_length(target_lengths_[e]));
    if (count > 0 && ((count + 1) * source > budget || (count + 1) * target > budget)) return false;
    ++count;
    longest_source = source;
    longest_target = target;
    return true;
  };
  const auto close_at = [&](int64_t p) {
    starts.push_back(p);
    count = longest_source = longest_target = 0;
  };

  int64_t p = 0;
  while (p < n) {
    if (try_add(p)) {
      ++p;
    } else {
      close_at(p);
    }
  }
  // starts.size() micro-batches now, the last one still open.
  const int64_t packed = static_cast<int64_t>(starts.size());
  if (options_.drop_last || packed % per_step == 0) {
    close_at(n);
    return starts;
  }
  // Pad: go on packing from the start of the order (again and again for a tiny dataset) until the last step is
  // complete and its last micro-batch is full.
  const int64_t wanted = (packed + per_step - 1) / per_step * per_step;
  for (;;) {
    if (try_add(p)) {
      ++p;
    } else if (static_cast<int64_t>(starts.size()) < wanted) {
      close_at(p);
    } else {
      break;
    }
  }
  close_at(p);
  return starts;
}

DistributedBatchSampler::EpochPlan DistributedBatchSampler::plan_epoch(int64_t epoch) const {
  EpochPlan plan;
  plan.epoch = epoch;
  plan.order = epoch_order(epoch);
  const int64_t per_step = options_.dp_size * options_.micro_batches;
  const int64_t n = num_examples();
  if (options_.max_tokens_per_micro_batch == 0) {
    const int64_t global = options_.global_batch;
    plan.steps = options_.drop_last ? n / global : (n + global - 1) / global;
    const int64_t micro_batches = plan.steps * per_step;
    plan.starts.resize(static_cast<size_t>(micro_batches + 1));
    for (int64_t k = 0; k <= micro_batches; ++k) plan.starts[k] = k * micro_batch_size_;
  } else {
    plan.starts = pack_by_tokens(plan.order);
    const int64_t micro_batches = static_cast<int64_t>(plan.starts.size()) - 1;
    plan.steps = micro_batches / per_step;  // exact with padding; the tail is dropped with drop_last
    T5S_CHECK(plan.steps > 0, "batch sampler: epoch ", epoch, " packs into ", micro_batches,
              " micro-batches of at most max_tokens_per_micro_batch ", options_.max_tokens_per_micro_batch,
              " tokens, fewer than the dp_size ", options_.dp_size, " x micro_batches ", options_.micro_batches,
              " one step needs (drop_last)");
  }
  return plan;
}

const DistributedBatchSampler::EpochPlan& DistributedBatchSampler::plan_for(int64_t epoch) const {
  if (plan_.epoch != epoch) plan_ = plan_epoch(epoch);
  return plan_;
}

std::vector<int64_t> DistributedBatchSampler::micro_batch(const EpochPlan& plan, int64_t index) const {
  const int64_t n = num_examples();
  std::vector<int64_t> examples;
  examples.reserve(static_cast<size_t>(plan.starts[index + 1] - plan.starts[index]));
  for (int64_t p = plan.starts[index]; p < plan.starts[index + 1]; ++p) examples.push_back(plan.order[p % n]);
  return examples;
}

std::vector<std::vector<int64_t>> DistributedBatchSampler::next_step() {
  const EpochPlan& plan = plan_for(position_.epoch);
  const int64_t dp = options_.dp_size, m = options_.micro_batches;
  const int64_t first = position_.step_in_epoch * dp * m;
  std::vector<std::vector<int64_t>> batches;
  batches.reserve(static_cast<size_t>(m));
  for (int64_t j = 0; j < m; ++j) batches.push_back(micro_batch(plan, first + j * dp + options_.dp_rank));
  if (++position_.step_in_epoch == plan.steps) position_ = {position_.epoch + 1, 0};
  return batches;
}

int64_t DistributedBatchSampler::steps_in_epoch(int64_t epoch) const {
  T5S_CHECK(epoch >= 0, "batch sampler: epoch must be >= 0, got ", epoch);
  if (options_.max_tokens_per_micro_batch == 0) {
    const int64_t n = num_examples(), global = options_.global_batch;
    return options_.drop_last ? n / global : (n + global - 1) / global;
  }
  if (plan_.epoch == epoch || position_.epoch == epoch) return plan_for(epoch).steps;
  return plan_epoch(epoch).steps;  // another epoch: leaves the current epoch's plan cached
}

int64_t DistributedBatchSampler::steps_per_epoch() const { return steps_in_epoch(position_.epoch); }

void DistributedBatchSampler::restore(const SamplerPosition& position) {
  T5S_CHECK(position.epoch >= 0 && position.step_in_epoch >= 0, "sampler position: epoch ", position.epoch,
            " and step_in_epoch ", position.step_in_epoch, " must be >= 0");
  const int64_t steps = steps_in_epoch(position.epoch);
  T5S_CHECK(position.step_in_epoch <= steps, "sampler position: step_in_epoch ", position.step_in_epoch,
            " is past the ", steps, " steps of epoch ", position.epoch,
            " (was it saved with another dataset, batch size or grid?)");
  position_ = position.step_in_epoch == steps ? SamplerPosition{position.epoch + 1, 0} : position;
}

double DistributedBatchSampler::epoch_fraction() const {
  return static_cast<double>(position_.epoch) +
         static_cast<double>(position_.step_in_epoch) / static_cast<double>(steps_per_epoch());
}

std::vector<std::vector<int64_t>> DistributedBatchSampler::epoch_micro_batches(int64_t epoch, int64_t max_steps) const {
  const EpochPlan plan = epoch == plan_.epoch ? plan_ : plan_epoch(epoch);
  const int64_t steps = max_steps >= 0 ? std::min(max_steps, plan.steps) : plan.steps;
  const int64_t count = steps * options_.dp_size * options_.micro_batches;
  std::vector<std::vector<int64_t>> batches;
  batches.reserve(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) batches.push_back(micro_batch(plan, k));
  return batches;
}

}  // namespace t5scale
