// The planner's memory advice: each change it offers lowers the prediction, and its figure is the one resolve_run
// gives the run with that setting written into its config (the path the job and the study plan take).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/units.h"
#include "plan/memory_advice.h"
#include "plan/resolved_run.h"

namespace t5scale {
namespace {

constexpr int64_t kWorld = 8;

// T5-3B on 8 GPUs of one node, a global batch of 64 (micro-batch 8 per replica), on 40 GiB each: it does not fit.
RunConfig three_b() {
  RunConfig c;
  c.model.name = "t5-3b";
  c.train.max_steps = 10;
  c.train.global_batch = 64;
  c.precision = RunConfig::Precision::kBf16;
  return c;
}

RunWorld gpus(int64_t device_gib) {
  RunWorld world;
  world.world_size = kWorld;
  world.on_gpu = true;
  world.device_share_bytes = gib_to_bytes(static_cast<double>(device_gib));
  return world;
}

ResolvedRun resolved(const RunConfig& c, int64_t device_gib = 40) {
  ResolvedRun r = resolve_run(c, gpus(device_gib), RunData{});
  EXPECT_TRUE(r.errors.empty()) << r.errors.front();
  EXPECT_TRUE(r.model && r.memory_inputs);
  return r;
}

std::vector<MemoryRemedy> remedies_of(const RunConfig& c, int64_t device_gib = 40, int64_t ranks_per_node = kWorld) {
  const ResolvedRun r = resolved(c, device_gib);
  return memory_remedies(*r.model, *r.memory_inputs,
                         RemedyLimits{kWorld, ranks_per_node, gib_to_bytes(static_cast<double>(device_gib))});
}

const MemoryRemedy* find(const std::vector<MemoryRemedy>& remedies, const std::string& prefix) {
  for (const auto& r : remedies) {
    if (r.setting.rfind(prefix, 0) == 0) return &r;
  }
  return nullptr;
}

int64_t total_bytes(const RunConfig& c) { return resolved(c).checkpointing.memory.total_bytes(); }

TEST(MemoryAdvice, EachFigureIsTheResolvedRunWithThatSetting) {
  const RunConfig c = three_b();
  const int64_t now = total_bytes(c);
  ASSERT_FALSE(fits_device_memory(now, gib_to_bytes(40)));
  const std::vector<MemoryRemedy> remedies = remedies_of(c);
  ASSERT_EQ(remedies.size(), 5u);  // four changes, none fits alone, and all four together
  for (const auto& r : remedies) {
    EXPECT_LT(r.memory.total_bytes(), now) << r.setting;
    EXPECT_EQ(r.fits, fits_device_memory(r.memory.total_bytes(), gib_to_bytes(40))) << r.setting;
  }

  const MemoryRemedy* checkpointing = find(remedies, "parallel.activation_checkpointing=true with "
                                                     "parallel.checkpoint_every_blocks=");
  ASSERT_NE(checkpointing, nullptr);
  RunConfig with = c;
  with.parallel.activation_checkpointing = ParallelSettings::ActivationCheckpointing::kOn;
  with.parallel.checkpoint_every_blocks = std::stoll(checkpointing->setting.substr(checkpointing->setting.rfind('=') + 1));
  EXPECT_EQ(checkpointing->memory.total_bytes(), total_bytes(with));

  const MemoryRemedy* zero1 = find(remedies, "parallel.zero1=true");
  ASSERT_NE(zero1, nullptr);
  EXPECT_EQ(find(remedies, "parallel.zero2"), nullptr);  // after ZeRO-1 only
  with = c;
  with.parallel.zero1 = true;
  EXPECT_EQ(zero1->memory.total_bytes(), total_bytes(with));

  const MemoryRemedy* tp = find(remedies, "parallel.tp=2 (dp 8 -> 4, micro-batch 8 -> 16)");
  ASSERT_NE(tp, nullptr);
  with = c;
  with.parallel.tp = 2;
  EXPECT_EQ(tp->memory.total_bytes(), total_bytes(with));

  const MemoryRemedy* accumulation = find(remedies, "train.grad_accumulation x2 (micro-batch 8 -> 4");
  ASSERT_NE(accumulation, nullptr);
  with = c;
  with.train.grad_accumulation = 2;
  EXPECT_EQ(accumulation->memory.total_bytes(), total_bytes(with));

  // None fits alone: all four together, as the config would say them (tp 2 makes the micro-batch 16, accumulation
  // x2 makes it 8 again).
  for (const auto& r : remedies) {
    if (r.setting.rfind("all together", 0) != 0) EXPECT_FALSE(r.fits) << r.setting;
  }
  const MemoryRemedy* together = find(remedies, "all together: parallel.zero1=true, parallel.tp=2, "
                                                "train.grad_accumulation x2 (micro-batch 16 -> 8)");
  ASSERT_NE(together, nullptr) << remedies.back().setting;
  with = c;
  with.parallel.zero1 = true;
  with.parallel.tp = 2;
  with.train.grad_accumulation = 2;
  const std::string& setting = together->setting;
  if (setting.find("checkpoint_every_blocks=") != std::string::npos) {
    with.parallel.activation_checkpointing = ParallelSettings::ActivationCheckpointing::kOn;
    with.parallel.checkpoint_every_blocks = std::stoll(setting.substr(setting.rfind('=') + 1));
  }
  EXPECT_EQ(together->memory.total_bytes(), total_bytes(with)) << setting;
  EXPECT_TRUE(together->fits) << together->describe();
}

TEST(MemoryAdvice, ZeroTwoComesAfterZeroOneAndOnlyWhatChangesTheRunIsOffered) {
  RunConfig c = three_b();
  c.parallel.zero1 = true;
  const std::vector<MemoryRemedy> remedies = remedies_of(c);
  EXPECT_EQ(find(remedies, "parallel.zero1"), nullptr);
  const MemoryRemedy* zero2 = find(remedies, "parallel.zero2=true");
  ASSERT_NE(zero2, nullptr);
  RunConfig with = c;
  with.parallel.zero2 = true;
  EXPECT_EQ(zero2->memory.total_bytes(), total_bytes(with));

  // Adafactor cannot shard its state (ZeRO-1 is refused with it).
  RunConfig adafactor = three_b();
  adafactor.optimizer.name = OptimizerSettings::Name::kAdafactor;
  EXPECT_EQ(find(remedies_of(adafactor), "parallel.zero"), nullptr);

  // A TP group stays inside a node: with one GPU per node no larger TP is offered.
  EXPECT_EQ(find(remedies_of(three_b(), 40, 1), "parallel.tp"), nullptr);

  // Everything already done: checkpointing every block, ZeRO-2, micro-batch 1, TP as wide as the node (and then
  // sequence parallelism).
  RunConfig done = three_b();
  done.parallel.activation_checkpointing = ParallelSettings::ActivationCheckpointing::kOn;
  done.parallel.checkpoint_every_blocks = 1;
  done.parallel.zero1 = done.parallel.zero2 = true;
  done.parallel.tp = kWorld;  // dp 1
  done.train.global_batch = 1;
  // With TP the one change left is sequence parallelism, offered with the run's prediction when it is on.
  const std::vector<MemoryRemedy> left = remedies_of(done, 1);
  const MemoryRemedy* sequence_parallel = find(left, "parallel.sequence_parallel=true");
  ASSERT_NE(sequence_parallel, nullptr);
  done.parallel.sequence_parallel = true;
  EXPECT_EQ(sequence_parallel->memory.total_bytes(), total_bytes(done));
  // Then, nothing else fitting, the optimizer's state on the host; with it, nothing is left.
  const std::vector<MemoryRemedy> last = remedies_of(done, 1);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].setting, "parallel.offload_optimizer=true");
  done.parallel.offload_optimizer = true;
  EXPECT_EQ(last[0].memory.total_bytes(), total_bytes(done));
  EXPECT_GT(last[0].memory.host_bytes, 0);
  EXPECT_TRUE(remedies_of(done, 1).empty());
}

// parallel.offload_optimizer moves the masters and moments off the device: the device keeps the weights in the
// compute dtype and the fp32 buckets; the host holds the state, the gradients' copy and the weights' staging.
TEST(MemoryAdvice, OffloadCountsTheHostApart) {
  RunConfig c = three_b();
  c.optimizer.name = OptimizerSettings::Name::kAdafactor;
  const MemoryPrediction plain = resolved(c).checkpointing.memory;
  c.parallel.offload_optimizer = true;
  const MemoryPrediction offloaded = resolved(c).checkpointing.memory;
  const int64_t n = plain.parameters_per_rank;
  EXPECT_EQ(plain.host_bytes, 0);
  EXPECT_EQ(offloaded.optimizer_bytes, 0);
  EXPECT_EQ(offloaded.weights_bytes, plain.weights_bytes);
  EXPECT_EQ(offloaded.gradients_bytes, plain.gradients_bytes);
  EXPECT_EQ(offloaded.host_bytes, plain.optimizer_bytes + n * 4 + n * 2);  // state, fp32 gradients, bf16 staging
  EXPECT_EQ(offloaded.total_bytes(), plain.total_bytes() - plain.optimizer_bytes);
}

// t5scale-train's start-up check of the offloaded state's host memory: every rank of the node together against the
// node's available memory, with the 5% the device check keeps; nothing to check without host memory.
TEST(MemoryAdvice, OffloadedStateMustFitTheNodesAvailableMemory) {
  const int64_t gib = int64_t{1} << 30;
  EXPECT_EQ(host_memory_refusal(0, 8, 16 * gib, 1 * gib), "");
  EXPECT_EQ(host_memory_refusal(10 * gib, 8, 100 * gib, 85 * gib), "");  // 80 of 85: 94%
  const std::string refused = host_memory_refusal(10 * gib, 8, 100 * gib, 84 * gib);  // 80 of 84: 95.2%
  EXPECT_NE(refused.find("parallel.offload_optimizer: predicted host memory 10.00 GiB per rank x 8 rank(s) on this "
                         "node = 80.00 GiB does not fit the node's 84.00 GiB available (MemAvailable; MemTotal "
                         "100.00 GiB) with 5% to spare; nothing was allocated."),
            std::string::npos)
      << refused;
  // The T5-3B run above with its Adafactor state offloaded on 8 GPUs of a node: refused by a node whose available
  // memory is just what the 8 ranks' state takes, held by one with 10% more.
  RunConfig c = three_b();
  c.optimizer.name = OptimizerSettings::Name::kAdafactor;
  c.parallel.offload_optimizer = true;
  const int64_t host = resolved(c).checkpointing.memory.host_bytes;
  ASSERT_GT(host, 0);
  EXPECT_NE(host_memory_refusal(host, kWorld, 2048 * gib, host * kWorld), "");
  EXPECT_EQ(host_memory_refusal(host, kWorld, 2048 * gib, host * kWorld * 11 / 10), "");
}

TEST(MemoryAdvice, TheLeastCheckpointingThatFitsIsOfferedBeforeEveryBlock) {
  // On a device where some checkpointing fits, the offer is the planner's own choice, not every block.
  const RunConfig c = three_b();
  const ResolvedRun r = resolved(c);
  int planners_choices = 0;  // cases where some checkpointing short of every block fits
  for (int64_t gib = 40; gib <= 160; gib += 8) {
    const CheckpointingChoice least = choose_activation_checkpointing(*r.model, *r.memory_inputs, gib_to_bytes(gib));
    if (fits_device_memory(r.checkpointing.memory.total_bytes(), gib_to_bytes(gib))) continue;
    const std::vector<MemoryRemedy> remedies = remedies_of(c, gib);
    const MemoryRemedy* offered =
        find(remedies, "parallel.activation_checkpointing=true with parallel.checkpoint_every_blocks=");
    ASSERT_NE(offered, nullptr) << gib;
    const int64_t k = std::stoll(offered->setting.substr(offered->setting.rfind('=') + 1));
    EXPECT_EQ(k, least.fits ? least.checkpoint_every_blocks : 1) << gib;
    if (least.fits && least.checkpoint_every_blocks > 1) ++planners_choices;
  }
  EXPECT_GT(planners_choices, 0);
}

}  // namespace
}  // namespace t5scale
