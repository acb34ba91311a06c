// The plan of a study: for every run of an expanded spec, what the trainer will do and what it will need, before
// anything is submitted — the grid (world, TP, DP), the batch split, the LR after its scaling rule, warmup, steps
// and epochs, predicted memory per GPU against the GPU's memory, and model FLOPs per step. The figures are
// resolve_run's (plan/resolved_run.h), which the trainer calls too, so that the plan and the run file's predicted_*
// attributes agree by construction.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "plan/cost_model.h"
#include "plan/lr_schedule.h"
#include "plan/resolved_run.h"
#include "study/study_forecast.h"
#include "study/study_spec.h"

namespace t5scale {

struct RunPlan {
  StudyRun run;
  // Where it runs (its step-time model's machine: telemetry.machine_rates, or slurm.gpu's published figures; none:
  // no forecast).
  RunWorld world;
  // What the job will do, as resolve_run (plan/resolved_run.h) answers for it. Its errors are every reason the run
  // cannot start ("<key>: <reason>"; none: valid): the expansion's, the plan's (a TP group across nodes, a dataset
  // that cannot be read, a prediction that does not fit) and resolve_run's; its notes, what deserves a look but does
  // not stop the run (a dataset not there yet, no step time predicted).
  ResolvedRun resolved;
  bool valid() const { return resolved.errors.empty(); }
  double device_memory_gib = 0.0;  // what the memory is checked against; 0 = no check (CPU jobs)
  std::string fits = "?";          // "yes", "NO", "?" (unknown), "-" (no check)
  // Predicted not to fit (fits "NO") and planned all the same on --allow-over-memory (PlanOptions); without it such
  // a run is invalid. The rendered script says so.
  bool over_memory_allowed = false;
  // Mean tokens of a training example (the data's, cut to the maximum lengths; the maximum lengths where the data is
  // not here yet), and the examples an evaluation reads (NaN: unknown).
  double mean_source_tokens = 0.0, mean_target_tokens = 0.0;
  double eval_examples = std::numeric_limits<double>::quiet_NaN();
  RunForecast forecast;  // time, cost and energy (study/study_forecast.h)

  std::string model_name() const { return resolved.model ? resolved.model->name : std::string(); }
  int64_t parameter_count() const { return resolved.model ? t5scale::parameter_count(*resolved.model) : 0; }
};

struct StudyPlan {
  StudySpec spec;
  std::vector<RunPlan> runs;
  double device_memory_gib = 0.0;
  std::string device_memory_basis;  // "80 GiB per GPU (slurm.gpu A100-80GB)"
  bool allow_over_memory = false;   // PlanOptions::allow_over_memory
  size_t invalid_count() const;
};

struct PlanOptions {
  ExpandOptions expand;
  // A run whose predicted memory does not fit its device (fits "NO") is invalid, so that render and submit leave
  // it out, unless this is set (t5scale-study --allow-over-memory): then it is planned with a note, and rendered
  // with a comment saying so. The prediction keeps 5% to spare; the job itself may still fit, or fail at its first
  // step.
  bool allow_over_memory = false;
};

// GPU memory in GiB for the spec: slurm.gpu_memory_gib when set, else the table by slurm.gpu (80 when unset),
// 0 for CPU-only jobs (slurm.gpu: none). An unknown GPU name is an Error listing the table.
double gpu_memory_gib(const SlurmSpec& slurm);
// The table: model names ("A100-80GB", "H100", ...) and their memory in GiB.
const std::vector<std::pair<std::string, double>>& gpu_memory_table();

// Expands and plans. Dataset files that exist are opened to count their training split.
StudyPlan plan_study(const StudySpec& spec, const PlanOptions& options = {});

// The table printed by `t5scale-study plan`, then every invalid run with all its errors, then notes.
std::string format_plan(const StudyPlan& plan);
// runs.csv: one row per run, a header row first; the columns are documented in jobs/README.md.
std::string plan_csv(const StudyPlan& plan);

// Figures for tables.
std::string format_flops(double flops);  // "2.81 PFLOP"

}  // namespace t5scale
