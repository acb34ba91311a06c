// resolve_run's steps per epoch, from the sampler where the lengths are known and from the count where not, the
// key each problem names, and the FLOPs and tokens of the step the time is predicted for.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "plan/cost_model.h"
#include "plan/machine_rates.h"
#include "plan/resolved_run.h"

namespace t5scale {
namespace {

RunConfig max_steps_config() {
  RunConfig c;
  c.train.max_steps = 10;
  c.train.global_batch = 8;
  return c;
}

RunData lengths_of(int64_t examples) {
  RunData data;
  data.vocab_size = 64;
  data.train_examples = examples;
  data.source_lengths.assign(static_cast<size_t>(examples), 5);
  data.target_lengths.assign(static_cast<size_t>(examples), 4);
  return data;
}

TEST(ResolvedRun, StepsPerEpochFromTheSamplerEqualTheCount) {
  const ResolvedRun counted = resolve_run(max_steps_config(), RunWorld{}, [] {
    RunData data;
    data.vocab_size = 64;
    data.train_examples = 100;
    return data;
  }());
  const ResolvedRun sampled = resolve_run(max_steps_config(), RunWorld{}, lengths_of(100));
  ASSERT_TRUE(counted.errors.empty() && sampled.errors.empty());
  EXPECT_EQ(counted.steps_per_epoch, 12);  // 100 / 8, the last partial batch dropped
  EXPECT_EQ(sampled.steps_per_epoch, 12);
}

TEST(ResolvedRun, EvaluationsEveryEpochsAreStepsOfThisBatch) {
  RunConfig config = max_steps_config();
  config.eval.every_epochs = 0.5;
  const ResolvedRun half = resolve_run(config, RunWorld{}, lengths_of(100));
  ASSERT_TRUE(half.errors.empty());
  EXPECT_EQ(half.eval_every_steps, 6);  // 12 steps per epoch
  config.train.global_batch = 4;        // twice the steps per epoch: twice the steps between evaluations
  EXPECT_EQ(resolve_run(config, RunWorld{}, lengths_of(100)).eval_every_steps, 13);  // 25 / 2, to the nearest
  config.eval.every_epochs = 0.0;
  config.eval.every_steps = 7;
  EXPECT_EQ(resolve_run(config, RunWorld{}, lengths_of(100)).eval_every_steps, 7);
}

TEST(ResolvedRun, TooFewExamplesForAGlobalBatchNameTrainGlobalBatch) {
  for (const RunData& data : {lengths_of(4), [] {
                                RunData counted;
                                counted.vocab_size = 64;
                                counted.train_examples = 4;
                                return counted;
                              }()}) {
    const ResolvedRun r = resolve_run(max_steps_config(), RunWorld{}, data);
    ASSERT_EQ(r.errors.size(), 1u) << (data.source_lengths.empty() ? "counted" : "sampled");
    EXPECT_EQ(r.errors[0].rfind("train.global_batch: ", 0), 0u) << r.errors[0];
  }
}

TEST(ResolvedRun, APackingProblemNamesTheTokenBudget) {
  RunConfig c = max_steps_config();
  c.data.max_tokens_per_micro_batch = 4;  // shorter than every example (5 + 4 tokens)
  const ResolvedRun r = resolve_run(c, RunWorld{}, lengths_of(100));
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].rfind("data.max_tokens_per_micro_batch: ", 0), 0u) << r.errors[0];
}

// The FLOPs and tokens a plan shows are those of the step its time is for, counted as the trainer counts them
// (padding not counted): on data of exactly a benchmark row's lengths, t5scale-bench's own figure for that row
// (results/gpu/NVIDIA_H200/2026-11-26/5-attention-and-rows/t5-3b-147-26-sdpa.json: model_flops_per_step); on short
// examples, theirs, not a batch at the maximum lengths.
TEST(ResolvedRun, FlopsAndTokensAreThoseOfTheStepTheTimeIsFor) {
  RunConfig c;
  c.model.name = "t5-3b";
  c.train.max_steps = 10;
  c.train.global_batch = 64;
  c.data.max_source_length = 147;
  c.data.max_target_length = 26;
  RunWorld world;
  world.on_gpu = true;
  world.rates = published_machine_rates("H200");
  RunData data;
  data.vocab_size = 32128;
  data.train_examples = 640;
  data.source_lengths.assign(640, 147);
  data.target_lengths.assign(640, 26);
  const ResolvedRun row = resolve_run(c, world, data);
  ASSERT_TRUE(row.errors.empty() && row.step_time.has_value());
  EXPECT_EQ(row.flops_per_step, 95921173954560.0);
  EXPECT_EQ(row.tokens_per_step, 64.0 * (147 + 26));

  c.data.max_source_length = 512;
  c.data.max_target_length = 128;
  data.source_lengths.assign(640, 3);
  data.target_lengths.assign(640, 2);
  const ResolvedRun short_examples = resolve_run(c, world, data);
  ASSERT_TRUE(short_examples.errors.empty() && short_examples.step_time.has_value());
  const ModelConfig model = named_model_config("t5-3b");
  EXPECT_EQ(short_examples.flops_per_step,
            unpadded_training_flops(model, std::vector<int64_t>(64, 3), std::vector<int64_t>(64, 2)));
  EXPECT_LT(short_examples.flops_per_step, training_flops(model, BatchShape{64, 512, 128}) / 50.0);
  EXPECT_EQ(short_examples.tokens_per_step, 64.0 * 5);
  // Without the data's lengths: one global batch at the planned lengths, and no tokens of a sampled step.
  RunData unknown;
  unknown.vocab_size = 32128;
  const ResolvedRun planned = resolve_run(c, world, unknown);
  EXPECT_EQ(planned.flops_per_step, training_flops(model, BatchShape{64, 512, 128}));
  EXPECT_TRUE(std::isnan(planned.tokens_per_step));
}

}  // namespace
}  // namespace t5scale
