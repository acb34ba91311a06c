#include "telemetry/run_summary.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <type_traits>

#include "core/check.h"
#include "telemetry/cost.h"

namespace t5scale {

namespace {

// The unit of each /eval column, from its declaration.
const std::map<std::string, std::string>& eval_units() {
#define T5SCALE_EVAL_UNIT(name, type, unit, initial) {#name, unit},
  static const std::map<std::string, std::string> units = {T5SCALE_EVAL_FIELDS(T5SCALE_EVAL_UNIT)};
#undef T5SCALE_EVAL_UNIT
  return units;
}

double mean(double sum, int64_t count) { return count > 0 ? sum / static_cast<double>(count) : kUnknownValue; }

}  // namespace

const std::vector<std::string>& run_file_eval_metrics() {
  static const std::vector<std::string> metrics = {"loss",        "rouge1", "rouge2",   "rougeL",  "rougeLsum",
                                                   "exact_match", "f1",     "accuracy", "macro_f1"};
  return metrics;
}

const std::vector<SummaryFigure>& summary_figures() {
  static const std::vector<SummaryFigure> figures = [] {
#define T5SCALE_SUMMARY_FIGURE(name, kind, unit) {#name, #kind, unit},
    std::vector<SummaryFigure> list = {T5SCALE_SUMMARY_FIGURES(T5SCALE_SUMMARY_FIGURE)};
#undef T5SCALE_SUMMARY_FIGURE
    for (const std::string& metric : run_file_eval_metrics()) {
      const std::string& unit = eval_units().at(metric);
      list.push_back({"final_" + metric, "float64", unit});
      list.push_back({"best_" + metric, "float64", unit});
      list.push_back({"best_" + metric + "_step", "int64", "step"});
    }
    return list;
  }();
  return figures;
}

void RunSummaryTotals::Maximum::add(double v) {
  if (std::isnan(v)) unknown = true;
  value = any ? std::max(value, v) : v;
  any = true;
}

double RunSummaryTotals::Maximum::result() const { return any && !unknown ? value : kUnknownValue; }

void RunSummaryTotals::add(const StepRecord& row) {
  ++steps_;
  samples_ += row.samples;
  tokens_ += row.source_tokens + row.target_tokens;
  step_time_sum_s_ += row.step_time_s;
  tokens_per_s_sum_ += row.tokens_per_s;
  mfu_sum_ += row.mfu;
  flops_sum_ += row.model_flops;
  steps_wall_s_.add(row.wall_time_s);
  for (const double bytes : row.memory_allocated_bytes) memory_allocated_sum_bytes_ += bytes;
  memory_allocated_count_ += static_cast<int64_t>(row.memory_allocated_bytes.size());
  for (const double bytes : row.memory_peak_bytes) memory_peak_bytes_.add(bytes);
  for (const double bytes : row.host_memory_bytes) host_memory_bytes_.add(bytes);
  newest_gpu_energy_j_ = row.gpu_energy_j;
  newest_cpu_energy_j_ = row.cpu_energy_j;
}

void RunSummaryTotals::add(const EvalRecord& row) {
  ++evals_;
  eval_time_sum_s_ += row.eval_time_s;
  evals_wall_s_.add(row.wall_time_s);
  if (metrics_.empty()) metrics_.resize(run_file_eval_metrics().size());
  const double values[] = {row.loss, row.rouge1, row.rouge2, row.rougeL, row.rougeLsum,
                           row.exact_match, row.f1, row.accuracy, row.macro_f1};  // run_file_eval_metrics()' order
  static_assert(sizeof(values) / sizeof(values[0]) == 9, "one value per eval metric");
  for (size_t m = 0; m < metrics_.size(); ++m) {
    const double value = values[m];
    if (std::isnan(value)) continue;
    Metric& metric = metrics_[m];
    metric.final_value = value;
    const bool lower_is_better = m == 0;  // loss
    if (std::isnan(metric.best_value) || (lower_is_better ? value < metric.best_value : value > metric.best_value)) {
      metric.best_value = value;
      metric.best_step = row.step;
    }
  }
}

void RunSummaryTotals::append_metrics(std::vector<std::pair<std::string, Hdf5Value>>& out,
                                      const std::string& prefix) const {
  for (size_t m = 0; m < run_file_eval_metrics().size(); ++m) {
    const std::string& name = run_file_eval_metrics()[m];
    const Metric metric = m < metrics_.size() ? metrics_[m] : Metric{};
    out.emplace_back(prefix + "final_" + name, metric.final_value);
    out.emplace_back(prefix + "best_" + name, metric.best_value);
    out.emplace_back(prefix + "best_" + name + "_step", metric.best_step);
  }
}

double RunSummaryTotals::mean_step_time_s() const { return mean(step_time_sum_s_, steps_); }

void RunSummaryTotals::carry_over(const RunSummaryTotals& kept, const EarlierGrids& earlier) {
  *this = RunSummaryTotals{};
#define T5SCALE_COPY_TOTAL(type, name) name = kept.name;
  T5SCALE_ROW_TOTALS(T5SCALE_COPY_TOTAL)
#undef T5SCALE_COPY_TOTAL
  metrics_ = kept.metrics_;
  earlier_ = earlier;
}

namespace {

std::string row_total_name(const char* member) {
  std::string name = member;
  name.pop_back();  // the member's trailing underscore
  return "rows_" + name;
}

}  // namespace

std::vector<std::pair<std::string, Hdf5Value>> RunSummaryTotals::earlier_grids_attributes() const {
  T5S_CHECK(earlier_.has_value(), "the run file has no earlier grids to write");
  std::vector<std::pair<std::string, Hdf5Value>> out;
#define T5SCALE_EARLIER_ATTRIBUTE(type, name, initial) out.emplace_back(#name, earlier_->name);
  T5SCALE_EARLIER_GRIDS_FIELDS(T5SCALE_EARLIER_ATTRIBUTE)
#undef T5SCALE_EARLIER_ATTRIBUTE
#define T5SCALE_TOTAL_ATTRIBUTE(type, name) out.emplace_back(row_total_name(#name), name);
  T5SCALE_ROW_TOTALS(T5SCALE_TOTAL_ATTRIBUTE)
#undef T5SCALE_TOTAL_ATTRIBUTE
  append_metrics(out, "rows_");
  return out;
}

RunSummaryTotals RunSummaryTotals::from_earlier_grids_attributes(
    const std::function<Hdf5Value(const std::string&)>& read) {
  auto take = [&](const std::string& name, auto& out) {
    using Out = std::decay_t<decltype(out)>;
    const Hdf5Value value = read(name);
    T5S_CHECK(std::holds_alternative<Out>(value), "/earlier_grids attribute '", name, "' has another type");
    out = std::get<Out>(value);
  };
  RunSummaryTotals totals;
  EarlierGrids earlier;
#define T5SCALE_TAKE_EARLIER(type, name, initial) take(#name, earlier.name);
  T5SCALE_EARLIER_GRIDS_FIELDS(T5SCALE_TAKE_EARLIER)
#undef T5SCALE_TAKE_EARLIER
#define T5SCALE_TAKE_TOTAL(type, name) take(row_total_name(#name), totals.name);
  T5SCALE_ROW_TOTALS(T5SCALE_TAKE_TOTAL)
#undef T5SCALE_TAKE_TOTAL
  totals.metrics_.resize(run_file_eval_metrics().size());
  for (size_t m = 0; m < run_file_eval_metrics().size(); ++m) {
    const std::string& name = run_file_eval_metrics()[m];
    take("rows_final_" + name, totals.metrics_[m].final_value);
    take("rows_best_" + name, totals.metrics_[m].best_value);
    take("rows_best_" + name + "_step", totals.metrics_[m].best_step);
  }
  totals.earlier_ = earlier;
  return totals;
}

std::vector<std::pair<std::string, Hdf5Value>> RunSummaryTotals::figures(const SummaryTerms& terms,
                                                                         const RunSummaryInputs& inputs,
                                                                         const std::string& status,
                                                                         const std::string& end_time_utc) const {
  std::vector<std::pair<std::string, Hdf5Value>> out;
  out.emplace_back("end_time_utc", end_time_utc);
  out.emplace_back("status", status);
  double wall_time_s = inputs.wall_time_s;
  if (std::isnan(wall_time_s)) {
    const double steps_wall = steps_wall_s_.result(), evals_wall = evals_wall_s_.result();
    wall_time_s = std::isnan(steps_wall) ? evals_wall : std::isnan(evals_wall) ? steps_wall
                                                                                : std::max(steps_wall, evals_wall);
  }
  // This grid's own wall time, cost and energy count from its start; the earlier grids' are added to them.
  const EarlierGrids before = earlier_.value_or(EarlierGrids{});
  if (earlier_ && std::isnan(wall_time_s)) wall_time_s = 0.0;  // nothing recorded on this grid yet
  out.emplace_back("wall_time_s", before.wall_time_s + wall_time_s);
  out.emplace_back("train_time_s", step_time_sum_s_);
  out.emplace_back("eval_time_s", eval_time_sum_s_);
  out.emplace_back("steps_completed", steps_);
  out.emplace_back("samples_total", samples_);
  out.emplace_back("tokens_total", tokens_);

  // Cumulative joules per rank at the end: given, or the newest step row's (NaN without rows).
  const size_t world = static_cast<size_t>(terms.world_size);
  auto final_energy = [&](const std::vector<double>& given, const std::vector<double>& newest) {
    if (!given.empty()) return given;
    return newest.size() == world ? newest : std::vector<double>(world, earlier_ ? 0.0 : kUnknownValue);
  };
  const std::vector<double> gpu_j = final_energy(inputs.gpu_energy_j, newest_gpu_energy_j_);
  const std::vector<double> cpu_j = final_energy(inputs.cpu_energy_j, newest_cpu_energy_j_);
  // GPU energy is per device: the sum over ranks. CPU energy is per node (every rank on a node reads the same
  // package counters): one value per node, the lowest rank on it that has one. Ranks are placed node by node.
  double gpu_total_j = 0;
  for (const double value : gpu_j) gpu_total_j += value;
  const size_t ranks_per_node = world / static_cast<size_t>(terms.nodes);
  double cpu_total_j = 0;
  for (size_t node = 0; node < static_cast<size_t>(terms.nodes); ++node) {
    double node_j = kUnknownValue;
    for (size_t r = node * ranks_per_node; r < (node + 1) * ranks_per_node && std::isnan(node_j); ++r) {
      node_j = cpu_j[r];
    }
    cpu_total_j += node_j;
  }
  // A source that was "none" was not measured: it adds nothing to energy_kwh, and its own figure is NaN.
  out.emplace_back("gpu_energy_kwh",
                   before.gpu_energy_kwh + (terms.gpu_measured ? gpu_total_j / kJoulesPerKwh : kUnknownValue));
  out.emplace_back("cpu_energy_kwh",
                   before.cpu_energy_kwh + (terms.cpu_measured ? cpu_total_j / kJoulesPerKwh : kUnknownValue));
  const double total_kwh =
      terms.gpu_measured || terms.cpu_measured
          ? energy_kwh(terms.gpu_measured ? gpu_total_j : 0.0, terms.cpu_measured ? cpu_total_j : 0.0, terms.pue)
          : kUnknownValue;
  out.emplace_back("energy_kwh", before.energy_kwh + total_kwh);
  out.emplace_back("cost_usd", before.cost_usd + cost_usd(terms.charging, wall_time_s));
  out.emplace_back("co2_kg", before.co2_kg + co2_kg(total_kwh, terms.carbon_intensity_g_per_kwh));
  // An estimate only where nothing was measured, never added to the measured figures.
  const bool estimated = !terms.gpu_measured && !terms.cpu_measured && std::isfinite(inputs.estimated_energy_j);
  const double estimated_kwh = estimated ? energy_kwh(inputs.estimated_energy_j, 0.0, terms.pue) : kUnknownValue;
  out.emplace_back("estimated_energy_kwh", before.estimated_energy_kwh + estimated_kwh);
  out.emplace_back("estimated_co2_kg",
                   before.estimated_co2_kg + co2_kg(estimated_kwh, terms.carbon_intensity_g_per_kwh));
  out.emplace_back("energy_estimate_method", estimated ? inputs.energy_estimate_method : std::string());
  out.emplace_back("mean_step_time_s", mean_step_time_s());
  out.emplace_back("mean_tokens_per_s", mean(tokens_per_s_sum_, steps_));
  out.emplace_back("mean_mfu", mean(mfu_sum_, steps_));
  Maximum memory_peak = memory_peak_bytes_;
  if (earlier_) memory_peak.add(before.peak_memory_bytes);
  out.emplace_back("peak_memory_bytes", memory_peak.result());
  out.emplace_back("mean_memory_allocated_bytes", mean(memory_allocated_sum_bytes_, memory_allocated_count_));
  // The resident set only grows: the end's value is the peak, and the rows cover the attempts before this one.
  Maximum host_memory = host_memory_bytes_;
  if (earlier_) host_memory.add(before.peak_host_memory_bytes);
  double host_peak = host_memory.result();
  for (const double bytes : inputs.host_memory_bytes) {
    if (!std::isnan(bytes)) host_peak = std::isnan(host_peak) ? bytes : std::max(host_peak, bytes);
  }
  out.emplace_back("peak_host_memory_bytes", host_peak);
  out.emplace_back("total_flops", flops_sum_);
  append_metrics(out, "");
  return out;
}

}  // namespace t5scale
