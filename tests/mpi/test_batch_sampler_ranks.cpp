// The distributed batch sampler over real MPI ranks (run whole under mpirun with 1, 2 and 4 ranks). For every
// TP x DP grid the world allows (world_rank = tp_rank + dp_rank * tp), each rank samples as its grid position
// says; every rank's batches are all-gathered and checked on every rank: the same batches on the TP ranks of a
// replica, disjoint replicas, the whole epoch covered, the same steps as one rank serving the whole global batch,
// deterministic across processes, and resumable from a position saved by rank 0.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/batch_sampler.h"

namespace t5scale {
namespace {

using Batches = std::vector<std::vector<int64_t>>;
using Steps = std::vector<Batches>;

int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

std::vector<int> tp_sizes_for_world() {
  std::vector<int> sizes;
  for (int tp = 1; tp <= world_size(); ++tp) {
    if (world_size() % tp == 0) sizes.push_back(tp);
  }
  return sizes;
}

// Every rank's int64 vector, indexed by world rank (MPI_Allgather of the sizes, MPI_Allgatherv of the data).
std::vector<std::vector<int64_t>> all_gather(const std::vector<int64_t>& mine) {
  const int ranks = world_size();
  int count = static_cast<int>(mine.size());
  std::vector<int> counts(ranks), displacements(ranks);
  MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; r < ranks; ++r) {
    displacements[r] = total;
    total += counts[r];
  }
  std::vector<int64_t> all(static_cast<size_t>(total));
  MPI_Allgatherv(mine.data(), count, MPI_INT64_T, all.data(), counts.data(), displacements.data(), MPI_INT64_T,
                 MPI_COMM_WORLD);
  std::vector<std::vector<int64_t>> per_rank(ranks);
  for (int r = 0; r < ranks; ++r) {
    per_rank[r].assign(all.begin() + displacements[r], all.begin() + displacements[r] + counts[r]);
  }
  return per_rank;
}

// Steps as [steps, (micro-batches, (size, ids...)...)...] and back.
std::vector<int64_t> encode(const Steps& steps) {
  std::vector<int64_t> out = {static_cast<int64_t>(steps.size())};
  for (const Batches& step : steps) {
    out.push_back(static_cast<int64_t>(step.size()));
    for (const auto& micro : step) {
      out.push_back(static_cast<int64_t>(micro.size()));
      out.insert(out.end(), micro.begin(), micro.end());
    }
  }
  return out;
}

Steps decode(const std::vector<int64_t>& data) {
  size_t p = 0;
  Steps steps(static_cast<size_t>(data.at(p++)));
  for (Batches& step : steps) {
    step.resize(static_cast<size_t>(data.at(p++)));
    for (auto& micro : step) {
      const size_t size = static_cast<size_t>(data.at(p++));
      micro.assign(data.begin() + p, data.begin() + p + size);
      p += size;
    }
  }
  return steps;
}

std::vector<Steps> gather_steps(const Steps& mine) {
  std::vector<Steps> all;
  for (const auto& data : all_gather(encode(mine))) all.push_back(decode(data));
  return all;
}

std::vector<int64_t> lengths(int64_t n, int64_t multiplier, int64_t modulus) {
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = 1 + (i * multiplier + 7) % modulus;
  return out;
}

struct Case {
  std::string name;
  BatchSamplerOptions options;  // dp_rank and dp_size are set per grid
};

std::vector<Case> cases() {
  std::vector<Case> out;
  BatchSamplerOptions o;
  o.global_batch = 16;  // divisible by dp x micro_batches for dp 1, 2, 4
  o.micro_batches = 2;
  o.seed = 2024;
  o.sortish_factor = 2;
  out.push_back({"fixed random drop_last", o});
  o.order = SamplingOrder::kSortish;
  o.drop_last = false;
  out.push_back({"fixed sortish pad", o});
  o.order = SamplingOrder::kSequential;
  out.push_back({"fixed sequential pad", o});
  o.max_tokens_per_micro_batch = 120;
  o.length_multiple = 8;
  o.order = SamplingOrder::kSortish;
  o.drop_last = true;
  out.push_back({"token budget sortish drop_last", o});
  o.order = SamplingOrder::kRandom;
  o.drop_last = false;
  out.push_back({"token budget random pad", o});
  return out;
}

class SamplerOnRanks : public ::testing::Test {
 protected:
  const int64_t n = 103;
  const std::vector<int64_t> source = lengths(n, 37, 60), target = lengths(n, 11, 25);
};

TEST_F(SamplerOnRanks, SameOnTpRanksDisjointAcrossReplicasCompleteOverAnEpoch) {
  for (const Case& c : cases()) {
    for (const int tp : tp_sizes_for_world()) {
      const int dp = world_size() / tp;
      const int dp_rank = world_rank() / tp;
      SCOPED_TRACE(c.name + ", tp " + std::to_string(tp) + " x dp " + std::to_string(dp));
      BatchSamplerOptions o = c.options;
      o.dp_size = dp;
      o.dp_rank = dp_rank;
      DistributedBatchSampler sampler(source, target, o);
      const int64_t steps_per_epoch = sampler.steps_per_epoch();
      Steps mine;
      for (int64_t s = 0; s < steps_per_epoch; ++s) mine.push_back(sampler.next_step());
      EXPECT_EQ(sampler.position(), (SamplerPosition{1, 0}));
      const std::vector<Steps> all = gather_steps(mine);

      // The same batches on every TP rank of a replica.
      for (int r = 0; r < world_size(); ++r) {
        EXPECT_EQ(all[r], all[(r / tp) * tp]) << "world rank " << r << " differs from its replica's TP rank 0";
      }
      // One rank serving dp x micro_batches micro-batches per step is the reference for what each step holds.
      BatchSamplerOptions whole = c.options;
      whole.micro_batches = c.options.micro_batches * dp;
      DistributedBatchSampler single(source, target, whole);
      ASSERT_EQ(single.steps_per_epoch(), steps_per_epoch);
      std::vector<int64_t> served;
      for (int64_t s = 0; s < steps_per_epoch; ++s) {
        const Batches reference = single.next_step();
        std::set<int64_t> in_step;
        for (int replica = 0; replica < dp; ++replica) {
          const Batches& got = all[replica * tp][s];
          ASSERT_EQ(static_cast<int64_t>(got.size()), o.micro_batches);
          for (int64_t j = 0; j < o.micro_batches; ++j) {
            EXPECT_EQ(got[j], reference[j * dp + replica]) << "step " << s << " replica " << replica;
            for (int64_t e : got[j]) {
              if (c.options.drop_last) {
                // Disjoint replicas, and no example twice in an epoch.
                EXPECT_TRUE(in_step.insert(e).second) << "example " << e << " twice in step " << s;
              }
              served.push_back(e);
            }
          }
        }
      }
      // Complete: drop_last serves the epoch's order but a tail shorter than a step, once each; pad serves every
      // example, then repeats from the start of the order.
      const std::vector<int64_t> order = single.epoch_order(0);
      std::vector<int64_t> sorted_served = served;
      std::sort(sorted_served.begin(), sorted_served.end());
      if (c.options.drop_last) {
        EXPECT_EQ(std::set<int64_t>(served.begin(), served.end()).size(), served.size());
        EXPECT_GT(served.size(), 0u);
        std::vector<int64_t> prefix(order.begin(), order.begin() + static_cast<int64_t>(served.size()));
        std::sort(prefix.begin(), prefix.end());
        EXPECT_EQ(sorted_served, prefix);
        if (c.options.max_tokens_per_micro_batch == 0) EXPECT_EQ(served.size(), static_cast<size_t>(n / 16 * 16));
      } else {
        EXPECT_EQ(std::set<int64_t>(served.begin(), served.end()).size(), static_cast<size_t>(n));
        std::vector<int64_t> expected(order);
        for (size_t p = order.size(); p < served.size(); ++p) expected.push_back(order[p % order.size()]);
        std::sort(expected.begin(), expected.end());
        EXPECT_EQ(sorted_served, expected);
      }
    }
  }
}

TEST_F(SamplerOnRanks, DeterministicAcrossProcessesAndNewEachEpoch) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    DistributedBatchSampler sampler(source, target, c.options);
    std::vector<int64_t> orders = sampler.epoch_order(0);
    const std::vector<int64_t> second = sampler.epoch_order(1);
    orders.insert(orders.end(), second.begin(), second.end());
    const std::vector<std::vector<int64_t>> all = all_gather(orders);
    for (int r = 1; r < world_size(); ++r) EXPECT_EQ(all[r], all[0]) << "rank " << r << " computed another order";
    if (c.options.order != SamplingOrder::kSequential) EXPECT_NE(sampler.epoch_order(0), second);
  }
}

TEST_F(SamplerOnRanks, ResumesFromAPositionSavedByRankZero) {
  for (const Case& c : cases()) {
    for (const int tp : tp_sizes_for_world()) {
      SCOPED_TRACE(c.name + ", tp " + std::to_string(tp));
      BatchSamplerOptions o = c.options;
      o.dp_size = world_size() / tp;
      o.dp_rank = world_rank() / tp;
      DistributedBatchSampler straight(source, target, o);
      const int64_t total = 2 * straight.steps_per_epoch() + 1;
      Steps expected;
      for (int64_t s = 0; s < total; ++s) expected.push_back(straight.next_step());

      for (const int64_t stop : {int64_t{1}, total / 2, total - 1}) {
        DistributedBatchSampler interrupted(source, target, o);
        for (int64_t s = 0; s < stop; ++s) interrupted.next_step();
        // Rank 0 writes the position (as a checkpoint manifest would); every rank reads that text back.
        std::string saved = world_rank() == 0 ? nlohmann::json(interrupted.position()).dump() : std::string();
        int size = static_cast<int>(saved.size());
        MPI_Bcast(&size, 1, MPI_INT, 0, MPI_COMM_WORLD);
        saved.resize(static_cast<size_t>(size));
        MPI_Bcast(saved.data(), size, MPI_CHAR, 0, MPI_COMM_WORLD);

        DistributedBatchSampler resumed(source, target, o);
        resumed.restore(nlohmann::json::parse(saved).get<SamplerPosition>());
        Steps rest;
        for (int64_t s = stop; s < total; ++s) rest.push_back(resumed.next_step());
        EXPECT_EQ(rest, Steps(expected.begin() + stop, expected.end())) << "resumed after step " << stop;
        const std::vector<Steps> all = gather_steps(rest);
        for (int r = 0; r < world_size(); ++r) EXPECT_EQ(all[r], all[(r / tp) * tp]) << "world rank " << r;
      }
    }
  }
}

}  // namespace
}  // namespace t5scale
