// The distributed batch sampler on one process: fixed-size and token-budget batches, the three orders, drop_last
// and padding, determinism, resume, and every bad option. The multi-rank properties (same batch on every TP rank,
// disjoint replicas) are in tests/mpi/test_batch_sampler_ranks.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <iterator>
#include <map>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "data/batch_sampler.h"
#include "support/base_test_support.h"

namespace t5scale {
namespace {

using testing::error_of;
using Batches = std::vector<std::vector<int64_t>>;

// Lengths in [low, high] from raw mt19937 outputs (their sequence is fixed by the standard; distributions are not).
std::vector<int64_t> lengths(int64_t n, uint32_t seed, int64_t low, int64_t high) {
  std::mt19937 rng(seed);
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (auto& length : out) length = low + static_cast<int64_t>(rng() % static_cast<uint32_t>(high - low + 1));
  return out;
}

DistributedBatchSampler sampler(int64_t n, BatchSamplerOptions options) {
  return DistributedBatchSampler(lengths(n, 1, 1, 50), lengths(n, 2, 1, 20), options);
}

BatchSamplerOptions fixed(int64_t global_batch, int64_t micro_batches = 1, SamplingOrder order = SamplingOrder::kRandom) {
  BatchSamplerOptions o;
  o.global_batch = global_batch;
  o.micro_batches = micro_batches;
  o.order = order;
  return o;
}

std::vector<int64_t> flatten(const Batches& batches) {
  std::vector<int64_t> all;
  for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
  return all;
}

// Every step of one epoch, starting from a fresh position.
std::vector<Batches> one_epoch(DistributedBatchSampler& s) {
  std::vector<Batches> steps;
  const int64_t epoch = s.position().epoch;
  while (s.position().epoch == epoch) steps.push_back(s.next_step());
  return steps;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(BatchSampler, FixedSizeStepsCoverTheEpochOnceWithDropLast) {
  DistributedBatchSampler s = sampler(37, fixed(8, 2));
  EXPECT_EQ(s.micro_batch_size(), 4);
  EXPECT_EQ(s.steps_per_epoch(), 4);  // floor(37 / 8)
  const std::vector<Batches> steps = one_epoch(s);
  ASSERT_EQ(steps.size(), 4u);
  std::set<int64_t> seen;
  for (const Batches& step : steps) {
    ASSERT_EQ(step.size(), 2u);
    for (const auto& micro : step) {
      EXPECT_EQ(micro.size(), 4u);
      for (int64_t e : micro) {
        EXPECT_TRUE(e >= 0 && e < 37) << e;
        EXPECT_TRUE(seen.insert(e).second) << "example " << e << " twice in one epoch";
      }
    }
  }
  EXPECT_EQ(seen.size(), 32u);
  // The 5 dropped examples are the tail of the epoch's order.
  const std::vector<int64_t> order = s.epoch_order(0);
  for (size_t p = 32; p < 37; ++p) EXPECT_EQ(seen.count(order[p]), 0u) << order[p];
  EXPECT_EQ(s.position(), (SamplerPosition{1, 0}));
}

TEST(BatchSampler, PadCompletesTheLastStepFromTheStartOfTheOrder) {
  BatchSamplerOptions o = fixed(8, 2);
  o.drop_last = false;
  DistributedBatchSampler s = sampler(37, o);
  EXPECT_EQ(s.steps_per_epoch(), 5);  // ceil(37 / 8)
  const std::vector<int64_t> order = s.epoch_order(0);
  std::vector<int64_t> served;
  for (const Batches& step : one_epoch(s)) {
    for (const auto& micro : step) EXPECT_EQ(micro.size(), 4u);
    const std::vector<int64_t> flat = flatten(step);
    served.insert(served.end(), flat.begin(), flat.end());
  }
  ASSERT_EQ(served.size(), 40u);
  EXPECT_EQ(std::set<int64_t>(served.begin(), served.end()).size(), 37u);  // every example
  std::vector<int64_t> expected(order);
  expected.insert(expected.end(), order.begin(), order.begin() + 3);  // the 3 repeats: the order's first three
  EXPECT_EQ(served, expected);

  // A dataset smaller than one global batch wraps as often as it needs to.
  o.global_batch = 8;
  o.micro_batches = 1;
  DistributedBatchSampler tiny = sampler(3, o);
  EXPECT_EQ(tiny.steps_per_epoch(), 1);
  const std::vector<int64_t> t = tiny.epoch_order(0);
  EXPECT_EQ(tiny.next_step(), (Batches{{t[0], t[1], t[2], t[0], t[1], t[2], t[0], t[1]}}));
}

TEST(BatchSampler, SequentialOrderAndTheRoundRobinLayoutOverReplicas) {
  // 10 examples, global batch 4 over 2 replicas x 1 micro-batch: micro-batches of 2, padded from the start.
  for (int64_t rank = 0; rank < 2; ++rank) {
    BatchSamplerOptions o = fixed(4, 1, SamplingOrder::kSequential);
    o.dp_size = 2;
    o.dp_rank = rank;
    o.drop_last = false;
    DistributedBatchSampler s = sampler(10, o);
    const std::vector<Batches> steps = one_epoch(s);
    const std::vector<Batches> expected =
        rank == 0 ? std::vector<Batches>{{{0, 1}}, {{4, 5}}, {{8, 9}}} : std::vector<Batches>{{{2, 3}}, {{6, 7}}, {{0, 1}}};
    EXPECT_EQ(steps, expected) << "dp_rank " << rank;
  }
  // 2 replicas x 2 micro-batches of 2: the step's micro-batches 0..3 go to replicas 0, 1, 0, 1.
  BatchSamplerOptions o = fixed(8, 2, SamplingOrder::kSequential);
  o.dp_size = 2;
  o.dp_rank = 1;
  DistributedBatchSampler s = sampler(16, o);
  EXPECT_EQ(s.next_step(), (Batches{{2, 3}, {6, 7}}));
  EXPECT_EQ(s.next_step(), (Batches{{10, 11}, {14, 15}}));
  EXPECT_EQ(s.position(), (SamplerPosition{1, 0}));
  EXPECT_EQ(s.next_step(), (Batches{{2, 3}, {6, 7}}));  // sequential: every epoch the same
}

TEST(BatchSampler, RandomOrderIsAFixedSplitMix64FisherYatesStream) {
  // Expected orders from an independent Python transcription of the documented algorithm (splitmix64 of
  // splitmix64(seed) + epoch, draws below i by rejection, Fisher-Yates from the end): they must never change,
  // or runs saved with one build would not resume on another.
  EXPECT_EQ(sampler(10, fixed(2)).epoch_order(0), (std::vector<int64_t>{9, 5, 7, 0, 1, 6, 2, 3, 8, 4}));
  EXPECT_EQ(sampler(10, fixed(2)).epoch_order(1), (std::vector<int64_t>{8, 1, 3, 4, 6, 5, 2, 0, 7, 9}));
  BatchSamplerOptions o = fixed(2);
  o.seed = 7;
  EXPECT_EQ(sampler(10, o).epoch_order(0), (std::vector<int64_t>{0, 9, 5, 2, 7, 4, 8, 6, 1, 3}));
}

TEST(BatchSampler, DeterministicForASeedAndNewEachEpoch) {
  BatchSamplerOptions o = fixed(16, 2);
  o.dp_size = 2;
  DistributedBatchSampler a = sampler(200, o), b = sampler(200, o);
  std::vector<Batches> a_steps, b_steps;
  for (int i = 0; i < 30; ++i) {  // 12 steps per epoch: crosses two epoch boundaries
    a_steps.push_back(a.next_step());
    b_steps.push_back(b.next_step());
  }
  EXPECT_EQ(a_steps, b_steps);
  EXPECT_NE(a_steps[0], a_steps[12]);  // epoch 1 starts differently
  const std::vector<int64_t> e0 = a.epoch_order(0), e1 = a.epoch_order(1), e2 = a.epoch_order(2);
  EXPECT_NE(e0, e1);
  EXPECT_NE(e1, e2);
  EXPECT_EQ(std::set<int64_t>(e1.begin(), e1.end()).size(), 200u);  // each a permutation
  o.seed = 99;
  EXPECT_NE(sampler(200, o).epoch_order(0), e0);
  o.order = SamplingOrder::kSortish;
  EXPECT_NE(sampler(200, o).epoch_order(0), sampler(200, o).epoch_order(1));
}

// Splits `order` into megabatches of `size` and checks each is sorted by (source, target) length, longest first.
void expect_sorted_megabatches(const std::vector<int64_t>& order, size_t size, const std::vector<int64_t>& source,
                               const std::vector<int64_t>& target) {
  for (size_t begin = 0; begin < order.size(); begin += size) {
    const size_t end = std::min(order.size(), begin + size);
    for (size_t p = begin + 1; p < end; ++p) {
      const int64_t a = order[p - 1], b = order[p];
      EXPECT_TRUE(source[a] > source[b] || (source[a] == source[b] && target[a] >= target[b]))
          << "megabatch at " << begin << ": example " << a << " (" << source[a] << ", " << target[a]
          << ") before example " << b << " (" << source[b] << ", " << target[b] << ")";
    }
  }
}

// Mean over micro-batches of (longest - shortest source length): how much padding the batching costs.
double mean_source_spread(const Batches& micro_batches, const std::vector<int64_t>& source) {
  double total = 0.0;
  for (const auto& micro : micro_batches) {
    int64_t lo = source[micro[0]], hi = lo;
    for (int64_t e : micro) {
      lo = std::min(lo, source[e]);
      hi = std::max(hi, source[e]);
    }
    total += static_cast<double>(hi - lo);
  }
  return total / static_cast<double>(micro_batches.size());
}

TEST(BatchSampler, SortishGroupsSimilarLengthsLongestFirst) {
  const int64_t n = 1000;
  const std::vector<int64_t> source = lengths(n, 11, 1, 300), target = lengths(n, 12, 1, 40);
  BatchSamplerOptions o = fixed(16, 2, SamplingOrder::kSortish);
  o.sortish_factor = 5;
  o.dp_size = 2;
  DistributedBatchSampler sortish(source, target, o);
  o.order = SamplingOrder::kRandom;
  DistributedBatchSampler random(source, target, o);

  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    const std::vector<int64_t> order = sortish.epoch_order(epoch);
    ASSERT_EQ(std::set<int64_t>(order.begin(), order.end()).size(), static_cast<size_t>(n));
    // Megabatches of factor x global batch = 80 examples, each sorted longest first.
    expect_sorted_megabatches(order, 80, source, target);
    // Each megabatch holds the examples of the same stretch of the random permutation, but for the longest
    // example of the epoch, which changed places with the first.
    const std::vector<int64_t> permutation = random.epoch_order(epoch);
    const int64_t longest = *std::max_element(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return source[a] != source[b] ? source[a] < source[b] : target[a] < target[b];
    });
    EXPECT_EQ(source[order[0]], source[longest]);
    EXPECT_EQ(target[order[0]], target[longest]);
    int64_t moved = 0;
    for (size_t begin = 0; begin < order.size(); begin += 80) {
      const size_t end = std::min(order.size(), begin + 80);
      const std::set<int64_t> got(order.begin() + begin, order.begin() + end);
      const std::set<int64_t> was(permutation.begin() + begin, permutation.begin() + end);
      std::vector<int64_t> differ;
      std::set_symmetric_difference(got.begin(), got.end(), was.begin(), was.end(), std::back_inserter(differ));
      moved += static_cast<int64_t>(differ.size());
    }
    EXPECT_LE(moved, 4);  // at most one example out and one in, in two megabatches
  }
  // The first micro-batch of step 0 (replica 0's first) holds the epoch's longest example.
  const Batches first = sortish.next_step();
  EXPECT_EQ(first[0][0], sortish.epoch_order(0)[0]);
  // Micro-batches of similar length: far less spread (padding) than random batches.
  const double sortish_spread = mean_source_spread(sortish.epoch_micro_batches(0), source);
  const double random_spread = mean_source_spread(random.epoch_micro_batches(0), source);
  EXPECT_LT(sortish_spread, 0.25 * random_spread) << sortish_spread << " vs " << random_spread;
}

TEST(BatchSampler, TokenBudgetPacksGreedilyWithinTheBudget) {
  const int64_t n = 500;
  const std::vector<int64_t> source = lengths(n, 21, 1, 60), target = lengths(n, 22, 1, 30);
  for (const int64_t multiple : {1, 8}) {
    for (const SamplingOrder order : {SamplingOrder::kRandom, SamplingOrder::kSortish, SamplingOrder::kSequential}) {
      BatchSamplerOptions o;
      o.max_tokens_per_micro_batch = 256;
      o.length_multiple = multiple;
      o.micro_batches = 3;
      o.dp_size = 2;
      o.order = order;
      o.sortish_factor = 4;
      DistributedBatchSampler s(source, target, o);
      EXPECT_EQ(s.micro_batch_size(), 0);
      const auto padded = [&](int64_t length) { return (length + multiple - 1) / multiple * multiple; };
      const std::vector<int64_t> epoch_order = s.epoch_order(0);
      const Batches micro = s.epoch_micro_batches(0);
      // The micro-batches are the order's prefix cut greedily: each within budget, and the next example after
      // each would have broken it.
      std::vector<int64_t> concatenated = flatten(micro);
      ASSERT_LE(concatenated.size(), epoch_order.size());
      EXPECT_TRUE(std::equal(concatenated.begin(), concatenated.end(), epoch_order.begin()));
      size_t position = 0;
      for (const auto& batch : micro) {
        int64_t longest_source = 0, longest_target = 0;
        for (int64_t e : batch) {
          longest_source = std::max(longest_source, padded(source[e]));
          longest_target = std::max(longest_target, padded(target[e]));
        }
        const int64_t count = static_cast<int64_t>(batch.size());
        EXPECT_LE(count * longest_source, 256);
        EXPECT_LE(count * longest_target, 256);
        position += batch.size();
        if (position < epoch_order.size()) {
          const int64_t next = epoch_order[position];
          EXPECT_TRUE((count + 1) * std::max(longest_source, padded(source[next])) > 256 ||
                      (count + 1) * std::max(longest_target, padded(target[next])) > 256)
              << "example " << next << " would have fitted";
        }
      }
      // Steps: whole groups of dp_size x micro_batches = 6 micro-batches; the rest of the epoch is dropped, less
      // than one step's worth.
      EXPECT_EQ(static_cast<int64_t>(micro.size()), s.steps_per_epoch() * 6);
      int64_t total_micro = static_cast<int64_t>(micro.size());
      for (size_t p = position; p < epoch_order.size(); ++total_micro) {  // count what the dropped tail packs into
        int64_t count = 0, ls = 0, lt = 0;
        while (p < epoch_order.size()) {
          const int64_t e = epoch_order[p];
          const int64_t ns = std::max(ls, padded(source[e])), nt = std::max(lt, padded(target[e]));
          if (count > 0 && ((count + 1) * ns > 256 || (count + 1) * nt > 256)) break;
          ++count, ls = ns, lt = nt, ++p;
        }
      }
      EXPECT_EQ(s.steps_per_epoch(), total_micro / 6);
      // The first steps alone (the planner's): the first 6 x steps micro-batches of the whole list; more steps
      // than the epoch has give the whole list.
      EXPECT_EQ(s.epoch_micro_batches(0, 2), Batches(micro.begin(), micro.begin() + 12));
      EXPECT_EQ(s.epoch_micro_batches(0, 0), Batches{});
      EXPECT_EQ(s.epoch_micro_batches(0, s.steps_per_epoch() + 5), micro);
      // Replica 0's step 0: micro-batches 0, 2, 4 of the epoch.
      EXPECT_EQ(s.next_step(), (Batches{micro[0], micro[2], micro[4]}));
    }
  }
}

TEST(BatchSampler, TokenBudgetPadWrapsToTheStartOfTheOrder) {
  const int64_t n = 301;
  const std::vector<int64_t> source = lengths(n, 31, 1, 40), target = lengths(n, 32, 1, 40);
  BatchSamplerOptions o;
  o.max_tokens_per_micro_batch = 128;
  o.micro_batches = 2;
  o.dp_size = 4;
  o.drop_last = false;
  o.seed = 5;
  DistributedBatchSampler s(source, target, o);
  const Batches micro = s.epoch_micro_batches(0);
  EXPECT_EQ(micro.size() % 8, 0u);
  EXPECT_EQ(static_cast<int64_t>(micro.size()), s.steps_per_epoch() * 8);
  const std::vector<int64_t> order = s.epoch_order(0);
  const std::vector<int64_t> served = flatten(micro);
  ASSERT_GE(served.size(), order.size());
  EXPECT_TRUE(std::equal(order.begin(), order.end(), served.begin()));  // every example, in order
  for (size_t p = order.size(); p < served.size(); ++p) EXPECT_EQ(served[p], order[p - order.size()]) << p;
  o.drop_last = true;
  DistributedBatchSampler dropping(source, target, o);
  EXPECT_EQ(dropping.steps_per_epoch(), s.steps_per_epoch() - 1);
}

TEST(BatchSampler, ExampleLongerThanTheBudgetIsAnErrorNamingIt) {
  std::vector<int64_t> source(20, 10), target(20, 5);
  source[7] = 100;
  target[12] = 70;
  BatchSamplerOptions o;
  o.max_tokens_per_micro_batch = 64;
  const std::string message = error_of([&] { DistributedBatchSampler(source, target, o); });
  EXPECT_TRUE(has(message, "example 7 (source 100 tokens, target 5 tokens) does not fit max_tokens_per_micro_batch 64 "
                           "on its own, nor do 1 more examples"))
      << message;
  // Rounded up to a multiple of 8, a 60-token source needs 64: fits; with budget 63 it does not.
  source[7] = 60;
  target[12] = 5;
  o.length_multiple = 8;
  EXPECT_NO_THROW(DistributedBatchSampler(source, target, o));
  o.max_tokens_per_micro_batch = 63;
  EXPECT_TRUE(has(error_of([&] { DistributedBatchSampler(source, target, o); }),
                  "example 7 (source 60 tokens, target 5 tokens, padded to a multiple of 8) does not fit"));
}

// Steps from a fresh sampler until `total` steps, versus `k` steps, a saved position through JSON text, and a new
// sampler restored from it.
void expect_resume_matches(const std::vector<int64_t>& source, const std::vector<int64_t>& target,
                           const BatchSamplerOptions& o, int total, int k) {
  DistributedBatchSampler straight(source, target, o);
  std::vector<Batches> expected;
  for (int i = 0; i < total; ++i) expected.push_back(straight.next_step());

  DistributedBatchSampler first(source, target, o);
  for (int i = 0; i < k; ++i) first.next_step();
  const std::string saved = nlohmann::json(first.position()).dump();
  DistributedBatchSampler resumed(source, target, o);
  resumed.restore(nlohmann::json::parse(saved).get<SamplerPosition>());
  EXPECT_EQ(resumed.position(), first.position());
  for (int i = k; i < total; ++i) EXPECT_EQ(resumed.next_step(), expected[i]) << "step " << i << " after resuming at " << k;
}

TEST(BatchSampler, ResumeFromASavedPositionContinuesTheSameSequence) {
  const std::vector<int64_t> source = lengths(150, 41, 1, 80), target = lengths(150, 42, 1, 20);
  BatchSamplerOptions o = fixed(12, 3);
  o.dp_size = 2;
  o.dp_rank = 1;
  for (const SamplingOrder order : {SamplingOrder::kRandom, SamplingOrder::kSortish}) {
    o.order = order;
    for (int k : {0, 5, 12, 13, 30}) expect_resume_matches(source, target, o, 40, k);  // 12 steps per epoch
  }
  BatchSamplerOptions budget;
  budget.max_tokens_per_micro_batch = 160;
  budget.micro_batches = 2;
  budget.dp_size = 2;
  budget.order = SamplingOrder::kSortish;
  budget.drop_last = false;
  DistributedBatchSampler probe(source, target, budget);
  const int per_epoch = static_cast<int>(probe.steps_per_epoch());
  for (int k : {1, per_epoch - 1, per_epoch, per_epoch + 2}) expect_resume_matches(source, target, budget, 3 * per_epoch, k);

  const nlohmann::json json = SamplerPosition{3, 17};
  EXPECT_EQ(json.dump(), R"({"epoch":3,"step_in_epoch":17})");
}

TEST(BatchSampler, EpochFractionAndPositionsAcrossEpochs) {
  DistributedBatchSampler s = sampler(40, fixed(10));
  EXPECT_EQ(s.steps_per_epoch(), 4);
  EXPECT_DOUBLE_EQ(s.epoch_fraction(), 0.0);
  s.next_step();
  EXPECT_DOUBLE_EQ(s.epoch_fraction(), 0.25);
  for (int i = 0; i < 5; ++i) s.next_step();
  EXPECT_EQ(s.position(), (SamplerPosition{1, 2}));
  EXPECT_DOUBLE_EQ(s.epoch_fraction(), 1.5);
  s.restore({2, 4});  // the end of epoch 2 is the start of epoch 3
  EXPECT_EQ(s.position(), (SamplerPosition{3, 0}));
}

TEST(BatchSampler, AStepIsTheSameForEveryGridWithTheSameGlobalBatch) {
  // dp 1 x 6 micro-batches serves, in each step, exactly the micro-batches that dp 3 x 2 spreads over replicas.
  const std::vector<int64_t> source = lengths(100, 51, 1, 30), target = lengths(100, 52, 1, 30);
  for (const bool token_budget : {false, true}) {
    BatchSamplerOptions one = fixed(24, 6, SamplingOrder::kSortish);
    one.sortish_factor = 2;
    if (token_budget) one.max_tokens_per_micro_batch = 90;
    DistributedBatchSampler single(source, target, one);
    std::vector<DistributedBatchSampler> replicas;
    for (int64_t r = 0; r < 3; ++r) {
      BatchSamplerOptions o = one;
      o.dp_size = 3;
      o.dp_rank = r;
      o.micro_batches = 2;
      replicas.emplace_back(source, target, o);
    }
    ASSERT_EQ(single.steps_per_epoch(), replicas[0].steps_per_epoch());
    for (int64_t step = 0; step < 2 * single.steps_per_epoch(); ++step) {
      const Batches whole = single.next_step();
      for (int64_t r = 0; r < 3; ++r) {
        const Batches mine = replicas[r].next_step();
        EXPECT_EQ(mine, (Batches{whole[r], whole[3 + r]})) << "step " << step << " replica " << r;
      }
    }
  }
}

TEST(BatchSampler, BadOptionsAreErrorsNamingTheOption) {
  const std::vector<int64_t> ten(10, 5);
  const auto error_for = [&](const BatchSamplerOptions& o) {
    return error_of([&] { DistributedBatchSampler(ten, ten, o); });
  };
  const std::map<std::string, std::function<void(BatchSamplerOptions&)>> cases = {
      {"global_batch must be > 0, got 0", [](BatchSamplerOptions& o) { o.global_batch = 0; }},
      {"global_batch 10 is not divisible by dp_size 2 x micro_batches 3",
       [](BatchSamplerOptions& o) { o.global_batch = 10, o.dp_size = 2, o.micro_batches = 3; }},
      {"dp_size must be > 0, got 0", [](BatchSamplerOptions& o) { o.dp_size = 0; }},
      {"dp_rank 2 is outside [0, dp_size 2)", [](BatchSamplerOptions& o) { o.dp_size = 2, o.dp_rank = 2; }},
      {"dp_rank -1 is outside", [](BatchSamplerOptions& o) { o.dp_rank = -1; }},
      {"micro_batches must be > 0, got 0", [](BatchSamplerOptions& o) { o.micro_batches = 0; }},
      {"sortish_factor must be > 0, got 0", [](BatchSamplerOptions& o) { o.sortish_factor = 0; }},
      {"max_tokens_per_micro_batch must be >= 0", [](BatchSamplerOptions& o) { o.max_tokens_per_micro_batch = -1; }},
      {"length_multiple must be >= 0, got -8", [](BatchSamplerOptions& o) { o.length_multiple = -8; }},
      {"the dataset's 10 examples hold no complete global_batch of 16 (drop_last)",
       [](BatchSamplerOptions& o) { o.global_batch = 16; }},
      {"epoch 0 packs into 1 micro-batches of at most max_tokens_per_micro_batch 100 tokens, fewer than the dp_size 2 x "
       "micro_batches 1 one step needs (drop_last)",
       [](BatchSamplerOptions& o) { o.max_tokens_per_micro_batch = 100, o.dp_size = 2; }},
  };
  for (const auto& [expected, change] : cases) {
    BatchSamplerOptions o;
    o.global_batch = 2;
    change(o);
    const std::string message = error_for(o);
    EXPECT_TRUE(has(message, "batch sampler: " + expected)) << "expected '" << expected << "' in: " << message;
  }

  BatchSamplerOptions o;
  o.global_batch = 2;
  EXPECT_TRUE(has(error_of([&] { DistributedBatchSampler(ten, std::vector<int64_t>(9, 5), o); }),
                  "source_lengths has 10 entries but target_lengths has 9"));
  EXPECT_TRUE(has(error_of([&] { DistributedBatchSampler({}, {}, o); }), "the dataset has no examples"));
  std::vector<int64_t> with_empty = ten;
  with_empty[4] = 0;
  EXPECT_TRUE(has(error_of([&] { DistributedBatchSampler(ten, with_empty, o); }),
                  "example 4 has source length 5 and target length 0; both must be > 0"));
  EXPECT_TRUE(has(error_of([] { parse_sampling_order("shuffled"); }),
                  "data.sampling: unknown order 'shuffled' (choices: random, sortish, sequential)"));
  EXPECT_EQ(parse_sampling_order("sortish"), SamplingOrder::kSortish);
  EXPECT_EQ(sampling_order_name(SamplingOrder::kSequential), "sequential");

  DistributedBatchSampler s(ten, ten, o);  // 5 steps per epoch
  EXPECT_TRUE(has(error_of([&] { s.restore({1, 6}); }), "sampler position: step_in_epoch 6 is past the 5 steps of epoch 1"));
  EXPECT_TRUE(has(error_of([] { nlohmann::json::parse(R"({"epoch": 1})").get<SamplerPosition>(); }),
                  "sampler position: missing field 'step_in_epoch'"));
  EXPECT_TRUE(has(error_of([] { nlohmann::json::parse(R"({"epoch": -1, "step_in_epoch": 0})").get<SamplerPosition>(); }),
                  "sampler position: field 'epoch' must be an integer >= 0, got -1"));
}

}  // namespace
}  // namespace t5scale
