// What a study will cost before it runs: for every run, from the step-time model's step (plan/step_time_model.h) and
// the run's plan — tokens/s, scaling efficiency against the study's run of the same model, lengths and global batch
// on the fewest devices, the training and evaluation time against slurm.time_limit, node-hours used and reserved,
// cost (its share of the nodes, as the job is charged), energy and the checkpoint's size —
// and the same summed over the study. `t5scale-study plan` prints it under the runs table.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/charging.h"

namespace t5scale {

struct StudyPlan;
struct RunPlan;

struct RunForecast {
  static constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();
  bool known = false;                 // a step time was predicted
  double step_time_s = kUnknown;
  // Source + target tokens of the step the time is for, as t5scale-train counts them (padding not counted).
  double tokens_per_step = kUnknown;
  double tokens_per_s = kUnknown;
  // Model FLOPs of that step against the time and every device's peak (the rates' datasheet peak, or
  // telemetry.peak_flops_per_device); unknown without a peak.
  double mfu = kUnknown;
  // tokens/s per device against the reference run's: the run of the same model, data, lengths, steps and global
  // batch on the fewest devices (1.0 for itself); unknown where the study runs that on one number of devices only.
  double scaling_efficiency = kUnknown;
  std::string reference_run;  // the run scaling_efficiency compares with; "" without one
  int64_t evaluations = 0;               // during training and at the end
  double eval_examples = kUnknown;       // per evaluation
  double eval_time_s = kUnknown;         // all evaluations
  double train_time_s = kUnknown;        // total steps x step time
  double run_time_s = kUnknown;          // training + evaluations
  double time_limit_s = kUnknown;        // slurm.time_limit
  double node_hours = kUnknown;          // nodes x run time
  double reserved_node_hours = kUnknown;  // nodes x time limit
  Charging charging;                     // what the run is charged for (core/charging.h)
  double cost_usd = kUnknown;            // run time at the charging's price; unknown without a price
  double energy_kwh = kUnknown;          // devices x their power x run time x PUE (no power known: unknown)
  double checkpoint_bytes = kUnknown;    // fp32 weights and the optimizer's state, all ranks together
  std::vector<std::string> warnings;     // the run will not fit its time limit, or reserves far more
};

// The highest MFU a prediction may show: above it (and above the device's peak) the step-time model is wrong for the
// run, and the plan prints no time, throughput or cost for it. Megatron-LM's best published large-model runs reach
// about 55-60%; t5scale's measured H200 rows 25-38%.
inline constexpr double kHighestCredibleMfu = 0.70;

// Seconds of a Slurm time ("MM", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM", "D-HH:MM:SS"); NaN when it is none of them.
double slurm_time_seconds(const std::string& time);

// Fills every run's forecast (RunPlan::forecast) and adds its warnings to the run's notes.
void forecast_study(StudyPlan& plan);

// The table `t5scale-study plan` prints, with a line of study totals; "" when no run has a step time.
std::string format_forecast(const StudyPlan& plan);

}  // namespace t5scale
