// The LR plan: scaling rules (k = 1, 4, 32), warmup (ratio, scaled to keep its samples), steps from epochs and
// epochs from steps, the schedules' values by hand, and every schedule against transformers' own schedulers on
// reference values that make_lr_schedule_reference.py wrote ($T5SCALE_LR_SCHEDULE_REFERENCE, set by ctest).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "config/run_config.h"
#include "plan/lr_schedule.h"
#include "support/base_test_support.h"

namespace t5scale {
namespace {

using testing::error_of;

RunConfig config_with(const std::vector<std::string>& overrides) {
  RunConfig c;
  c.train.max_steps = 1000;
  apply_overrides(c, overrides);
  return c;
}

LrPlan plan_for(const std::vector<std::string>& overrides, int64_t world_size = 1, int64_t steps_per_epoch = 100) {
  return make_lr_plan(config_with(overrides), world_size, steps_per_epoch);
}

TEST(LrSchedule, ScalingRulesForBatchRatios1_4_32) {
  // base 1e-3 tuned at a global batch of 16; the global batches 16, 64, 512 are k = 1, 4, 32.
  const std::vector<std::pair<int64_t, double>> batches = {{16, 1.0}, {64, 4.0}, {512, 32.0}};
  const double expected_sqrt[] = {1e-3, 2e-3, 0.005656854249492381};  // 1e-3 x sqrt(32) = 5.656854249492381e-3
  int i = 0;
  for (const auto& [global_batch, k] : batches) {
    const std::string batch = "train.global_batch=" + std::to_string(global_batch);
    const LrPlan none = plan_for({batch, "optimizer.lr=1e-3", "lr_scaling.rule=none"});
    const LrPlan linear = plan_for({batch, "optimizer.lr=1e-3", "lr_scaling.rule=linear"});
    const LrPlan sqrt = plan_for({batch, "optimizer.lr=1e-3", "lr_scaling.rule=sqrt"});
    EXPECT_EQ(none.batch_ratio, k);
    EXPECT_EQ(none.effective_lr, 1e-3);
    EXPECT_DOUBLE_EQ(linear.effective_lr, 1e-3 * k);
    EXPECT_DOUBLE_EQ(sqrt.effective_lr, expected_sqrt[i++]);
    EXPECT_EQ(sqrt.base_lr, 1e-3);
    EXPECT_EQ(sqrt.global_batch, global_batch);
    EXPECT_EQ(sqrt.lr_at(999), sqrt.effective_lr);  // constant decay, no warmup: the peak throughout
  }
  // The reference batch is a key: k = 64 / 256 scales down.
  EXPECT_DOUBLE_EQ(plan_for({"train.global_batch=64", "lr_scaling.reference_global_batch=256", "lr_scaling.rule=sqrt",
                             "optimizer.lr=1e-3"})
                       .effective_lr,
                   5e-4);
}

TEST(LrSchedule, ScalingUsesTheResolvedGlobalBatch) {
  // fixed_micro: global batch = 4 x dp 8 x accumulation 2 = 64, k = 4 against the reference 16.
  const LrPlan p = plan_for({"train.batch_mode=fixed_micro", "train.micro_batch=4", "train.grad_accumulation=2",
                             "lr_scaling.rule=linear", "optimizer.lr=1e-4"},
                            8);
  EXPECT_EQ(p.global_batch, 64);
  EXPECT_DOUBLE_EQ(p.effective_lr, 4e-4);
}

TEST(LrSchedule, ScaledWarmupKeepsItsSamples) {
  // 100 warmup steps at the reference batch 16 are 1600 samples.
  auto warmup = [](int64_t global_batch, bool scale) {
    return plan_for({"lr_schedule.warmup_steps=100", "train.global_batch=" + std::to_string(global_batch),
                     scale ? "lr_scaling.scale_warmup=true" : "lr_scaling.scale_warmup=false"})
        .warmup_steps;
  };
  EXPECT_EQ(warmup(16, true), 100);
  EXPECT_EQ(warmup(64, true), 25);
  EXPECT_EQ(warmup(512, true), 4);  // 3.125 -> 4: at least the reference's samples
  EXPECT_EQ(warmup(48, true), 34);  // 33.3 -> 34
  EXPECT_EQ(warmup(8, true), 200);
  EXPECT_EQ(warmup(64, false), 100);
  const LrPlan p = plan_for({"lr_schedule.warmup_steps=100", "train.global_batch=64", "lr_scaling.scale_warmup=true"});
  EXPECT_EQ(p.configured_warmup_steps, 100);
  EXPECT_TRUE(p.warmup_scaled);
  // The warmup is linear to the peak over the scaled steps.
  EXPECT_EQ(p.lr_at(0), 0.0);
  EXPECT_DOUBLE_EQ(p.lr_at(5), p.effective_lr * 0.2);
  EXPECT_EQ(p.lr_at(25), p.effective_lr);
}

TEST(LrSchedule, WarmupFromRatio) {
  EXPECT_EQ(plan_for({"lr_schedule.warmup_ratio=0.06"}).warmup_steps, 60);
  EXPECT_EQ(plan_for({"lr_schedule.warmup_ratio=0.0625", "train.max_steps=100"}).warmup_steps, 7);  // 6.25 up
  // 100 x 0.07 is 7.000000000000001 in doubles: 7 steps (transformers' math.ceil would make it 8).
  EXPECT_EQ(plan_for({"lr_schedule.warmup_ratio=0.07", "train.max_steps=100"}).warmup_steps, 7);
}

TEST(LrSchedule, StepsAndEpochsBothWays) {
  const LrPlan from_epochs = plan_for({"train.max_steps=0", "train.epochs=3"}, 1, 256);
  EXPECT_EQ(from_epochs.total_steps, 768);
  EXPECT_EQ(from_epochs.epochs, 3.0);
  EXPECT_EQ(plan_for({"train.max_steps=0", "train.epochs=2.5"}, 1, 7).total_steps, 18);  // 17.5 up
  EXPECT_EQ(plan_for({"train.max_steps=0", "train.epochs=0.1"}, 1, 30).total_steps,
            3);  // not 4 from 3.0000000000000004
  const LrPlan from_steps = plan_for({"train.max_steps=1000"}, 1, 256);
  EXPECT_EQ(from_steps.total_steps, 1000);
  EXPECT_EQ(from_steps.epochs, 3.90625);
  const LrPlan unknown = plan_for({"train.max_steps=1000"}, 1, 0);
  EXPECT_TRUE(std::isnan(unknown.epochs));
  EXPECT_EQ(error_of([] {
              plan_for({"train.max_steps=0", "train.epochs=2"}, 1, 0);
            }).rfind("train.epochs: 2 epochs need", 0),
            0u);
}

TEST(LrSchedule, StepsPerEpochOfTheSampler) {
  EXPECT_EQ(optimizer_steps_per_epoch(4096, 16, true), 256);
  EXPECT_EQ(optimizer_steps_per_epoch(100, 16, true), 6);
  EXPECT_EQ(optimizer_steps_per_epoch(100, 16, false), 7);
  EXPECT_EQ(optimizer_steps_per_epoch(0, 16, false), 0);
}

TEST(LrSchedule, WarmupLongerThanTheRunIsRefused) {
  // 100 steps at batch 16 become 400 at batch 4: longer than the 200-step run.
  const std::string e = error_of([] {
    plan_for({"train.max_steps=200", "lr_schedule.warmup_steps=100", "train.global_batch=4",
              "lr_scaling.scale_warmup=true"});
  });
  EXPECT_EQ(e.rfind("lr_schedule.warmup_steps: a warmup of 400 steps (100 scaled by lr_scaling.scale_warmup) is "
                    "longer than the run's 200 steps",
                    0),
            0u)
      << e;
}

TEST(LrSchedule, ScheduleValuesByHand) {
  // warmup 10, total 110, peak 1
  auto plan = [](const std::string& decay, double min_ratio = 0.0) {
    return plan_for({"optimizer.lr=1", "train.max_steps=110", "lr_schedule.warmup_steps=10",
                     "lr_schedule.decay=" + decay, "lr_schedule.min_lr_ratio=" + std::to_string(min_ratio)});
  };
  const LrPlan linear = plan("linear");
  EXPECT_EQ(linear.lr_at(0), 0.0);  // the first update, as Hugging Face counts
  EXPECT_EQ(linear.lr_at(5), 0.5);
  EXPECT_EQ(linear.lr_at(10), 1.0);
  EXPECT_EQ(linear.lr_at(60), 0.5);
  EXPECT_EQ(linear.lr_at(110), 0.0);
  EXPECT_EQ(linear.lr_at(500), 0.0);
  const LrPlan linear_floor = plan("linear", 0.1);
  EXPECT_DOUBLE_EQ(linear_floor.lr_at(60), 0.55);
  EXPECT_DOUBLE_EQ(linear_floor.lr_at(110), 0.1);
  const LrPlan cosine = plan("cosine", 0.1);
  EXPECT_EQ(cosine.lr_at(10), 1.0);
  EXPECT_DOUBLE_EQ(cosine.lr_at(60), 0.55);
  EXPECT_DOUBLE_EQ(cosine.lr_at(110), 0.1);
  EXPECT_DOUBLE_EQ(cosine.lr_at(1000), 0.1);  // stays at its end value past the run
  const LrPlan constant = plan("constant");
  EXPECT_EQ(constant.lr_at(3), 0.3);
  EXPECT_EQ(constant.lr_at(110), 1.0);
  const LrPlan inverse_sqrt = plan("inverse_sqrt");
  EXPECT_EQ(inverse_sqrt.lr_at(10), 1.0);
  EXPECT_EQ(inverse_sqrt.lr_at(40), 0.5);  // sqrt(10 / 40)
  EXPECT_EQ(inverse_sqrt.inverse_sqrt_timescale, 10);
  EXPECT_EQ(plan("inverse_sqrt", 0.6).lr_at(40), 0.6);  // the floor
  // No warmup: timescale 10000, lr / sqrt(1 + n / 10000).
  const LrPlan no_warmup = plan_for({"optimizer.lr=1", "train.max_steps=40000", "lr_schedule.decay=inverse_sqrt"});
  EXPECT_EQ(no_warmup.inverse_sqrt_timescale, 10000);
  EXPECT_EQ(no_warmup.lr_at(0), 1.0);
  EXPECT_EQ(no_warmup.lr_at(30000), 0.5);
  EXPECT_NE(error_of([&] { linear.lr_at(-1); }).find("the step must be >= 0"), std::string::npos);
}

TEST(LrSchedule, DescribeGivesStepsAndEpochs) {
  const LrPlan steps = plan_for({"train.max_steps=1000", "train.global_batch=64", "lr_scaling.rule=sqrt",
                                 "optimizer.lr=1e-4", "lr_schedule.warmup_steps=100", "lr_scaling.scale_warmup=true",
                                 "lr_schedule.decay=cosine", "lr_schedule.min_lr_ratio=0.1"},
                                1, 256);
  EXPECT_EQ(steps.describe(),
            "lr: base 0.0001 x sqrt(k 4) (lr_scaling sqrt) = peak 0.0002, k = global batch 64 / reference 16; "
            "warmup 25 steps (100 scaled to keep the warmup's samples); decay cosine to 0.1 x peak; 1000 steps = "
            "3.906 epochs of 256 steps of 64 sequences");
  const LrPlan epochs = plan_for({"train.max_steps=0", "train.epochs=2"}, 1, 50);
  EXPECT_EQ(epochs.describe(),
            "lr: base 0.0003 (lr_scaling none) = peak 0.0003, k = global batch 16 / reference 16; warmup 0 steps; "
            "decay constant; 100 steps = 2 epochs of 50 steps of 16 sequences");
  EXPECT_EQ(plan_for({}, 1, 0).describe().find(
                "1000 steps = ? epochs (steps per epoch unknown until the dataset is read)") != std::string::npos,
            true);
  const LrPlan adafactor = plan_for({"optimizer.name=adafactor", "optimizer.adafactor_relative_step=true"}, 1, 100);
  EXPECT_EQ(adafactor.describe(),
            "lr: Adafactor's relative step size (optimizer.lr and the schedule unused); 1000 steps = 10 epochs of 100 "
            "steps of 16 sequences");
}

// ---- against transformers ----

// Relative error allowed against transformers: both sides evaluate the same double expressions in the same order,
// so the values agree to rounding; 1e-12 leaves room for a libm that rounds cos or sqrt differently in the last bit.
constexpr double kRelativeTolerance = 1e-12;

TEST(LrScheduleVsTransformers, EveryCaseEveryStep) {
  const char* path = std::getenv("T5SCALE_LR_SCHEDULE_REFERENCE");
  ASSERT_NE(path, nullptr) << "T5SCALE_LR_SCHEDULE_REFERENCE is not set: ctest sets it to the file that "
                              "tests/plan/make_lr_schedule_reference.py writes";
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "cannot read " << path;
  const nlohmann::json reference = nlohmann::json::parse(in);
  ASSERT_EQ(reference.at("format_version").get<int>(), 1);
  std::cout << "reference from transformers " << reference.at("transformers").get<std::string>() << ", torch "
            << reference.at("torch").get<std::string>() << "\n";
  const auto& cases = reference.at("cases");
  ASSERT_GE(cases.size(), 13u);
  for (const auto& c : cases) {
    const std::string name = c.at("name").get<std::string>();
    RunConfig config;
    apply_overrides(config, c.at("set").get<std::vector<std::string>>());
    ASSERT_EQ(validate_for_world(config, c.at("world_size").get<int64_t>()).size(), 0u) << name;
    const LrPlan plan = make_lr_plan(config, c.at("world_size").get<int64_t>(), c.at("steps_per_epoch").get<int64_t>());
    EXPECT_EQ(plan.effective_lr, c.at("effective_lr").get<double>()) << name;
    EXPECT_EQ(plan.warmup_steps, c.at("warmup_steps").get<int64_t>()) << name;
    EXPECT_EQ(plan.total_steps, c.at("total_steps").get<int64_t>()) << name;
    const auto lrs = c.at("lr").get<std::vector<double>>();
    ASSERT_EQ(static_cast<int64_t>(lrs.size()), plan.total_steps + 1) << name;
    double worst = 0.0;
    int64_t worst_step = 0;
    for (int64_t step = 0; step <= plan.total_steps; ++step) {
      const double expected = lrs[step], ours = plan.lr_at(step);
      const double error = expected == 0.0 ? std::abs(ours) : std::abs(ours - expected) / std::abs(expected);
      if (error > worst || std::isnan(ours)) worst = std::isnan(ours) ? INFINITY : error, worst_step = step;
    }
    EXPECT_LE(worst, kRelativeTolerance) << name << ": worst relative error " << worst << " at step " << worst_step
                                         << " (ours " << plan.lr_at(worst_step) << ", transformers " << lrs[worst_step]
                                         << ")";
    if (worst > 0) std::cout << name << ": worst relative error " << worst << " at step " << worst_step << "\n";
  }
}

}  // namespace
}  // namespace t5scale
