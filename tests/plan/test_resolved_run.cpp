// resolve_run's steps per epoch, from the sampler where the lengths are known and from the count where not, and the
// key each problem names.
#include <gtest/gtest.h>

#include <string>
#include <vector>

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

}  // namespace
}  // namespace t5scale
