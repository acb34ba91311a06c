// /summary: a run's figures, declared once here and computed once, from every row the run file holds (all
// attempts') as the rows are added. The run file keeps /summary current at every flush, so a file whose job was
// killed, failed or is still running holds the figures of its flushed rows; finish() adds what the rows cannot
// know (the end's wall time, energy and host memory, an energy estimate) and the final status. The checked-in
// schema lists these figures (run_file_schema_json), and the analysis reads them, never recomputes them.
//
// Each line: FIGURE(name, kind, unit)  /* how it is computed */
// An unknown (NaN) input makes a figure NaN, except where a line says otherwise.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/hdf5_attributes.h"
#include "telemetry/cost.h"
#include "telemetry/step_record.h"

namespace t5scale {

#define T5SCALE_SUMMARY_FIGURES(FIGURE)                                                                          \
  FIGURE(end_time_utc, string, "")          /* finish()'s time; "" while the run has not finished */             \
  FIGURE(status, string, "")                /* running (flushed figures), completed, preempted, diverged, failed */ \
  FIGURE(wall_time_s, float64, "s")         /* since the first start: finish()'s, else the newest row's */       \
  FIGURE(train_time_s, float64, "s")        /* sum of step_time_s */                                             \
  FIGURE(eval_time_s, float64, "s")         /* sum of the evaluations' eval_time_s */                            \
  FIGURE(steps_completed, int64, "steps")   /* /steps rows */                                                    \
  FIGURE(samples_total, int64, "samples")                                                                        \
  FIGURE(tokens_total, int64, "tokens")     /* source + target */                                                \
  FIGURE(gpu_energy_kwh, float64, "kWh")    /* sum over ranks of the final cumulative joules; NaN unmeasured */  \
  FIGURE(cpu_energy_kwh, float64, "kWh")    /* per node, its lowest rank with a value (ranks share packages) */  \
  FIGURE(energy_kwh, float64, "kWh")        /* (gpu + cpu) x pue over the measured sources; NaN if neither */    \
  FIGURE(cost_usd, float64, "USD")          /* cost.h's Charging: NaN without a price, never 0 */                \
  FIGURE(co2_kg, float64, "kg")             /* energy_kwh x carbon_intensity_g_per_kwh / 1000 */                 \
  FIGURE(estimated_energy_kwh, float64, "kWh") /* x pue; only where neither source measured, else NaN */         \
  FIGURE(estimated_co2_kg, float64, "kg")                                                                        \
  FIGURE(energy_estimate_method, string, "")   /* how the estimate was made; "" without one */                   \
  FIGURE(mean_step_time_s, float64, "s")    /* means over the rows */                                            \
  FIGURE(mean_tokens_per_s, float64, "tokens/s")                                                                 \
  FIGURE(mean_mfu, float64, "fraction")                                                                          \
  FIGURE(peak_memory_bytes, float64, "B")   /* max of memory_peak_bytes over rows and ranks */                   \
  FIGURE(mean_memory_allocated_bytes, float64, "B") /* over rows and ranks */                                    \
  FIGURE(peak_host_memory_bytes, float64, "B") /* max over rows, ranks and finish()'s values (known unmeasured  \
                                                   rows aside: a run without steps has it too) */                 \
  FIGURE(total_flops, float64, "FLOP")      /* sum of model_flops */
// Then, for each eval metric m of run_file_eval_metrics(): final_<m> (the newest evaluation that computed it),
// best_<m> (min for loss, max for the rest) and best_<m>_step (the earliest step that reached it; -1 and NaN
// while no evaluation computed it), with the metric's unit.

// One figure of /summary as the schema lists it.
struct SummaryFigure {
  std::string name, dtype, unit;
};
// Every figure, in the order written: the list above, then the eval metrics' three each.
const std::vector<SummaryFigure>& summary_figures();

// What the figures need from the run's root attributes.
struct SummaryTerms {
  int64_t world_size = 1, nodes = 1;
  bool gpu_measured = false, cpu_measured = false;  // energy_source_gpu / _cpu other than "none"
  double pue = 1.0, carbon_intensity_g_per_kwh = 0.0;
  Charging charging;  // the prices, nodes, node share and GPUs held (root attributes of the same names)
};

// What the rows cannot tell: the end of the run after its last step (final evaluation, checkpoint). Left at
// their defaults, the newest rows' values are used.
struct RunSummaryInputs {
  double wall_time_s = kUnknownValue;  // since the first start, at the end
  std::vector<double> gpu_energy_j;    // (world_size,) cumulative at the end, or empty
  std::vector<double> cpu_energy_j;    // (world_size,) or empty
  std::vector<double> host_memory_bytes;  // (world_size,) each rank's peak resident set at the end, or empty
  // Where neither energy source measured anything: an estimate (telemetry/energy_estimate.h) and how it was made.
  double estimated_energy_j = kUnknownValue;
  std::string energy_estimate_method;
};

// What the attempts on earlier grids leave to a run file that a resume on another world size starts (the old file
// is set aside: its per-rank columns have another width). Those attempts' rows through `through_step` stay part
// of the run: their totals come over as the new file's starting totals (RunSummaryTotals::carry_over); what they
// spent, every row they wrote included (steps trained again cost their time and energy once already), is added
// to the new file's own figures. Written once, as the attributes of /earlier_grids, when the file is created,
// and carried on by resumes on the same grid.
#define T5SCALE_EARLIER_GRIDS_FIELDS(FIELD)                                                                      \
  FIELD(int64_t, through_step, -1)        /* the checkpoint the new grid resumed from */                       \
  FIELD(double, wall_time_s, 0.0)         /* the run's wall time when the new grid started */                  \
  FIELD(double, cost_usd, 0.0)            /* each at its own nodes and price */                                \
  FIELD(double, gpu_energy_kwh, 0.0)      /* NaN where a grid did not measure it */                            \
  FIELD(double, cpu_energy_kwh, 0.0)                                                                           \
  FIELD(double, energy_kwh, 0.0)          /* each with its own PUE */                                          \
  FIELD(double, co2_kg, 0.0)                                                                                   \
  FIELD(double, estimated_energy_kwh, 0.0)                                                                     \
  FIELD(double, estimated_co2_kg, 0.0)                                                                         \
  FIELD(double, peak_memory_bytes, kUnknownValue)                                                              \
  FIELD(double, peak_host_memory_bytes, kUnknownValue)

struct EarlierGrids {
#define T5SCALE_DECLARE_EARLIER(type, name, initial) type name = initial;
  T5SCALE_EARLIER_GRIDS_FIELDS(T5SCALE_DECLARE_EARLIER)
#undef T5SCALE_DECLARE_EARLIER
};

// The figures' running arithmetic over the rows, in the order they stand in the file.
class RunSummaryTotals {
 public:
  void add(const StepRecord& row);
  void add(const EvalRecord& row);
  // Starts a new grid's totals from those of the rows an earlier grid's file keeps (`kept`), with what the earlier
  // grids spent.
  void carry_over(const RunSummaryTotals& kept, const EarlierGrids& earlier);
  const std::optional<EarlierGrids>& earlier_grids() const { return earlier_; }
  double mean_step_time_s() const;  // /summary's figure over the rows added so far
  // /earlier_grids' attributes: `earlier` and the kept rows' totals (rows_*), and back.
  std::vector<std::pair<std::string, Hdf5Value>> earlier_grids_attributes() const;
  // `read` gives the value of the attribute it is asked for.
  static RunSummaryTotals from_earlier_grids_attributes(const std::function<Hdf5Value(const std::string&)>& read);
  // Every figure of summary_figures(), in its order. With earlier grids, the spent figures add theirs and the
  // wall time, cost and energy of this file's rows count from this grid's start.
  std::vector<std::pair<std::string, Hdf5Value>> figures(const SummaryTerms& terms, const RunSummaryInputs& inputs,
                                                         const std::string& status,
                                                         const std::string& end_time_utc) const;

 private:
  // Max over values with NaN poisoning (an unknown value makes the maximum unknown); NaN before any value.
  struct Maximum {
    double value = kUnknownValue;
    bool any = false, unknown = false;
    void add(double v);
    double result() const;
  };
  // The totals a new grid carries over (the rows_* attributes of /earlier_grids).
#define T5SCALE_ROW_TOTALS(FIELD)                                                                                \
  FIELD(int64_t, steps_) FIELD(int64_t, samples_) FIELD(int64_t, tokens_) FIELD(int64_t, evals_)                \
  FIELD(double, step_time_sum_s_) FIELD(double, eval_time_sum_s_) FIELD(double, tokens_per_s_sum_)             \
  FIELD(double, mfu_sum_) FIELD(double, flops_sum_) FIELD(double, memory_allocated_sum_bytes_)                 \
  FIELD(int64_t, memory_allocated_count_)
#define T5SCALE_DECLARE_TOTAL(type, name) type name = 0;
  T5SCALE_ROW_TOTALS(T5SCALE_DECLARE_TOTAL)
#undef T5SCALE_DECLARE_TOTAL
  std::optional<EarlierGrids> earlier_;
  Maximum steps_wall_s_, evals_wall_s_, memory_peak_bytes_, host_memory_bytes_;
  std::vector<double> newest_gpu_energy_j_, newest_cpu_energy_j_;  // the newest step row's
  struct Metric {
    double final_value = kUnknownValue, best_value = kUnknownValue;
    int64_t best_step = -1;
  };
  std::vector<Metric> metrics_;  // run_file_eval_metrics()' order
  // <prefix>final_<m>, <prefix>best_<m>, <prefix>best_<m>_step for each eval metric.
  void append_metrics(std::vector<std::pair<std::string, Hdf5Value>>& out, const std::string& prefix) const;
};

// The eval metrics of /summary's final_<m>, best_<m>, best_<m>_step (lower is better for loss only).
const std::vector<std::string>& run_file_eval_metrics();

}  // namespace t5scale
