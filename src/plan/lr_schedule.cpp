// LR plan: scaling rule, warmup, total steps and the schedules of transformers/optimization.py (4.57), written
// with the same operations in the same order so that the values agree to the last bits (the unit test compares
// them with transformers' own schedulers).
#include "plan/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/check.h"

namespace t5scale {

namespace {

// Hugging Face's inverse_sqrt timescale when there is no warmup (get_inverse_sqrt_schedule: `num_warmup_steps or
// 10_000`): the LR then decays from the first step as 1 / sqrt(1 + n / 10000).
constexpr int64_t kInverseSqrtDefaultTimescale = 10000;
constexpr double kPi = 3.14159265358979323846;  // math.pi

// ceil(x), except that a product meant to be whole (0.1 epochs x 30 steps = 3.0000000000000004) is not pushed to
// the next integer by its rounding error.
int64_t ceil_of_product(double x) {
  const double nearest = std::round(x);
  if (std::abs(x - nearest) <= 1e-9 * std::max(1.0, std::abs(x))) return static_cast<int64_t>(nearest);
  return static_cast<int64_t>(std::ceil(x));
}

std::string number(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.4g", value);
  return buffer;
}

}  // namespace

int64_t optimizer_steps_per_epoch(int64_t num_examples, int64_t global_batch, bool drop_last) {
  T5S_CHECK(num_examples >= 0 && global_batch > 0, "steps per epoch of ", num_examples, " examples in batches of ",
            global_batch);
  return drop_last ? num_examples / global_batch : (num_examples + global_batch - 1) / global_batch;
}

LrPlan make_lr_plan(const RunConfig& config, int64_t world_size, int64_t steps_per_epoch) {
  return make_lr_plan(config, resolve_batch(config, world_size), steps_per_epoch);
}

LrPlan make_lr_plan(const RunConfig& config, const BatchPlan& batch, int64_t steps_per_epoch) {
  const auto& train = config.train;
  const auto& schedule = config.lr_schedule;
  const auto& scaling = config.lr_scaling;
  T5S_CHECK(batch.global_batch > 0, "LR plan: the batch split has no global batch (resolve_batch first)");
  T5S_CHECK(scaling.reference_global_batch > 0, "lr_scaling.reference_global_batch: must be >= 1, got ",
            scaling.reference_global_batch);
  T5S_CHECK(steps_per_epoch >= 0, "LR plan: steps per epoch must be >= 0, got ", steps_per_epoch);

  LrPlan plan;
  plan.base_lr = config.optimizer.lr;
  plan.rule = scaling.rule;
  plan.global_batch = batch.global_batch;
  plan.reference_global_batch = scaling.reference_global_batch;
  plan.batch_ratio = static_cast<double>(batch.global_batch) / static_cast<double>(scaling.reference_global_batch);
  switch (scaling.rule) {
    case LrScalingSettings::Rule::kNone: plan.effective_lr = plan.base_lr; break;
    case LrScalingSettings::Rule::kLinear: plan.effective_lr = plan.base_lr * plan.batch_ratio; break;
    case LrScalingSettings::Rule::kSqrt: plan.effective_lr = plan.base_lr * std::sqrt(plan.batch_ratio); break;
  }

  plan.steps_per_epoch = steps_per_epoch;
  if (train.max_steps > 0) {
    plan.total_steps = train.max_steps;
  } else {
    T5S_CHECK(train.epochs > 0, "train.max_steps: neither train.max_steps nor train.epochs is set");
    T5S_CHECK(steps_per_epoch > 0, "train.epochs: ", train.epochs,
              " epochs need the number of steps per epoch, which is 0 (an empty training split, or fewer examples "
              "than one global batch of ",
              batch.global_batch, " with data.drop_last)");
    plan.total_steps = std::max<int64_t>(1, ceil_of_product(train.epochs * static_cast<double>(steps_per_epoch)));
  }
  plan.epochs = steps_per_epoch > 0 ? static_cast<double>(plan.total_steps) / static_cast<double>(steps_per_epoch)
                                    : std::numeric_limits<double>::quiet_NaN();

  plan.configured_warmup_steps = schedule.warmup_steps > 0
                                     ? schedule.warmup_steps
                                     : ceil_of_product(static_cast<double>(plan.total_steps) * schedule.warmup_ratio);
  plan.warmup_steps = plan.configured_warmup_steps;
  if (scaling.scale_warmup && plan.configured_warmup_steps > 0) {
    // Same number of warmup samples as at the reference batch, rounded up to whole steps.
    const int64_t samples = plan.configured_warmup_steps * scaling.reference_global_batch;
    plan.warmup_steps = (samples + batch.global_batch - 1) / batch.global_batch;
    plan.warmup_scaled = true;
  }
  T5S_CHECK(plan.warmup_steps <= plan.total_steps, "lr_schedule.warmup_steps: a warmup of ", plan.warmup_steps,
            " steps",
            plan.warmup_scaled ? msg(" (", plan.configured_warmup_steps, " scaled by lr_scaling.scale_warmup)") : "",
            " is longer than the run's ", plan.total_steps, " steps");

  plan.decay = schedule.decay;
  plan.min_lr_ratio = schedule.min_lr_ratio;
  plan.inverse_sqrt_timescale = plan.warmup_steps > 0 ? plan.warmup_steps : kInverseSqrtDefaultTimescale;
  plan.adafactor_relative_step =
      config.optimizer.name == OptimizerSettings::Name::kAdafactor && config.optimizer.adafactor_relative_step;
  return plan;
}

double LrPlan::lr_at(int64_t step) const {
  T5S_CHECK(step >= 0, "lr_at: the step must be >= 0, got ", step);
  const int64_t warmup = warmup_steps, total = total_steps;
  if (step < warmup) {
    return effective_lr * (static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup)));
  }
  const double r = min_lr_ratio;
  switch (decay) {
    case LrScheduleSettings::Decay::kConstant: return effective_lr;
    case LrScheduleSettings::Decay::kLinear: {
      double factor =
          std::max(0.0, static_cast<double>(total - step) / static_cast<double>(std::max<int64_t>(1, total - warmup)));
      factor = factor * (1.0 - r) + r;
      return effective_lr * factor;
    }
    case LrScheduleSettings::Decay::kCosine: {
      double progress = static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(1, total - warmup));
      progress = std::min(progress, 1.0);  // past the end the LR stays at its final value
      const double num_cycles = 0.5;
      double factor = 0.5 * (1.0 + std::cos(kPi * num_cycles * 2.0 * progress));
      factor = factor * (1.0 - r) + r;
      return effective_lr * std::max(0.0, factor);
    }
    case LrScheduleSettings::Decay::kInverseSqrt: {
      const int64_t shift = inverse_sqrt_timescale - warmup;
      const double factor =
          1.0 / std::sqrt(static_cast<double>(step + shift) / static_cast<double>(inverse_sqrt_timescale));
      return effective_lr * std::max(factor, r);
    }
  }
  return effective_lr;
}

std::string LrPlan::describe() const {
  std::string out = "lr: ";
  if (adafactor_relative_step) {
    out += "Adafactor's relative step size (optimizer.lr and the schedule unused)";
  } else {
    out += "base " + number(base_lr);
    switch (rule) {
      case LrScalingSettings::Rule::kNone: out += " (lr_scaling none)"; break;
      case LrScalingSettings::Rule::kLinear: out += " x k " + number(batch_ratio) + " (lr_scaling linear)"; break;
      case LrScalingSettings::Rule::kSqrt: out += " x sqrt(k " + number(batch_ratio) + ") (lr_scaling sqrt)"; break;
    }
    out += msg(" = peak ", number(effective_lr), ", k = global batch ", global_batch, " / reference ",
               reference_global_batch);
    out += msg("; warmup ", warmup_steps, " steps");
    if (warmup_scaled) out += msg(" (", configured_warmup_steps, " scaled to keep the warmup's samples)");
    out += "; decay " + enum_name(decay);
    if (decay == LrScheduleSettings::Decay::kLinear || decay == LrScheduleSettings::Decay::kCosine) {
      out += " to " + number(min_lr_ratio) + " x peak";
    } else if (decay == LrScheduleSettings::Decay::kInverseSqrt) {
      out += msg(" (timescale ", inverse_sqrt_timescale,
                 min_lr_ratio > 0 ? ", floor " + number(min_lr_ratio) + " x peak" : "", ")");
    }
  }
  out += msg("; ", total_steps, " steps = ");
  if (steps_per_epoch > 0) {
    out += msg(number(epochs), " epochs of ", steps_per_epoch, " steps");
  } else {
    out += "? epochs (steps per epoch unknown until the dataset is read)";
  }
  out += msg(" of ", global_batch, " sequences");
  return out;
}

}  // namespace t5scale
