#include "telemetry/resource_card.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "core/check.h"
#include "telemetry/cost.h"

namespace t5scale {
namespace {

// A figure of /summary as a number (NaN when absent or not a number) or as text ("" when absent).
double number_of(const ResourceCardFigures& f, const std::string& name) {
  const Hdf5Value* value = find_attribute(f.summary, name);
  if (value == nullptr) return std::numeric_limits<double>::quiet_NaN();
  if (const auto* d = std::get_if<double>(value)) return *d;
  if (const auto* i = std::get_if<int64_t>(value)) return static_cast<double>(*i);
  return std::numeric_limits<double>::quiet_NaN();
}

std::string text_of(const ResourceCardFigures& f, const std::string& name) {
  const Hdf5Value* value = find_attribute(f.summary, name);
  const auto* text = value != nullptr ? std::get_if<std::string>(value) : nullptr;
  return text != nullptr ? *text : "";
}

// The cost lines: the dedicated price (per GPU-hour or per node-hour) and the low-priority one.
std::string cost_lines(const ResourceCardFigures& f, double wall_time_s) {
  std::ostringstream card;
  char line[320];
  // /summary prices every grid of the run at its own nodes and share; the low-priority price applies to the same
  // node-hours (this grid's nodes x share x the wall time where the dedicated price does not tell them).
  const Charging& c = f.charging;
  const double cost = number_of(f, "cost_usd");
  const double node_hours = c.price_per_node_hour_usd > 0 && std::isfinite(cost)
                                ? cost / c.price_per_node_hour_usd
                                : charged_nodes(c) * wall_time_s / 3600.0;
  const std::string share = msg(c.nodes, " node(s) x ", f.node_share_basis);
  if (c.price_per_gpu_hour_usd > 0 && std::isfinite(cost)) {
    std::snprintf(line, sizeof(line), "cost            %.4f USD (%.2f USD per GPU-hour x %.4f GPU-hours)\n", cost,
                  c.price_per_gpu_hour_usd, cost / c.price_per_gpu_hour_usd);
  } else if (c.price_per_gpu_hour_usd > 0) {
    std::snprintf(line, sizeof(line), "cost            unknown (cost.price_per_gpu_hour_usd prices GPUs; %s)\n",
                  f.on_gpu ? "the GPUs held are unknown" : "this run held none");
  } else if (c.price_per_node_hour_usd > 0 && std::isfinite(cost)) {
    std::snprintf(line, sizeof(line), "cost            %.4f USD (%.2f USD per node-hour x %.4f node-hours: %s)\n", cost,
                  c.price_per_node_hour_usd, node_hours, share.c_str());
  } else if (c.price_per_node_hour_usd > 0) {
    std::snprintf(line, sizeof(line), "cost            unknown (node share %s)\n", f.node_share_basis.c_str());
  } else {
    std::snprintf(line, sizeof(line), "cost            unknown (%s)\n",
                  "neither cost.price_per_node_hour_usd nor cost.price_per_gpu_hour_usd set");
  }
  card << line;
  const double low_price = f.low_priority_price_per_node_hour_usd;
  if (!(low_price > 0)) {
    std::snprintf(line, sizeof(line), "cost low-prio   unknown (cost.low_priority_price_per_node_hour_usd not set)\n");
  } else if (!std::isfinite(node_hours)) {
    std::snprintf(line, sizeof(line), "cost low-prio   unknown (node share %s)\n", f.node_share_basis.c_str());
  } else {
    std::snprintf(line, sizeof(line), "cost low-prio   %.4f USD (%.2f USD per node-hour x %.4f node-hours)\n",
                  low_price * node_hours, low_price, node_hours);
  }
  card << line;
  return card.str();
}

// The energy lines (GPU, CPU) and the emissions: measured, or an estimate that says it is one.
std::string energy_lines(const ResourceCardFigures& f) {
  auto figure = [&](const char* name) { return number_of(f, name); };
  std::ostringstream card;
  char line[320];
  const bool gpu_known = f.gpu_energy_source != "none", cpu_known = f.cpu_energy_source != "none";
  auto kilojoules = [&](const char* name) { return std::to_string(figure(name) * kJoulesPerKwh / 1000.0); };
  std::snprintf(line, sizeof(line), "GPU energy      %s\n",
                gpu_known ? (kilojoules("gpu_energy_kwh") + " kJ (" + f.gpu_energy_source + ")").c_str()
                : f.on_gpu ? "not measured (no NVML)"
                           : "none (CPU ranks)");
  card << line;
  std::snprintf(line, sizeof(line), "CPU energy      %s\n",
                cpu_known ? (kilojoules("cpu_energy_kwh") + " kJ (RAPL)").c_str() : "not measured (RAPL not readable)");
  card << line;
  const std::string estimate_method = text_of(f, "energy_estimate_method");
  if (gpu_known || cpu_known) {
    std::snprintf(line, sizeof(line),
                  "emissions       %.6f kg CO2eq (%.6f kWh x PUE %.2f x %.0f g/kWh; measured sources only)\n",
                  figure("co2_kg"), figure("energy_kwh") / f.pue, f.pue, f.carbon_intensity_g_per_kwh);
    card << line;
  } else if (estimate_method.empty()) {
    card << "emissions       unknown (no energy measured)\n";
  } else {
    // Nothing measured: unknown, and beside it an estimate that says it is one.
    std::snprintf(line, sizeof(line),
                  "emissions       unknown (no energy measured); estimated %.6f kg CO2eq (%.6f kWh x PUE %.2f x "
                  "%.0f g/kWh)\n",
                  figure("estimated_co2_kg"), figure("estimated_energy_kwh") / f.pue, f.pue,
                  f.carbon_intensity_g_per_kwh);
    card << line << "energy estimate " << estimate_method << "\n";
  }
  return card.str();
}

}  // namespace

std::string resource_card(const ResourceCardFigures& f) {
  auto figure = [&](const char* name) { return number_of(f, name); };
  const double wall_time_s = figure("wall_time_s"), train_time_s = figure("train_time_s");
  const double steps_completed = figure("steps_completed");
  const int64_t steps = std::isfinite(steps_completed) ? static_cast<int64_t>(steps_completed) : 0;
  std::ostringstream card;
  char line[320];
  card << "---- resource card: " << f.run_name << " (" << text_of(f, "status") << ") ----\n";
  std::snprintf(line, sizeof(line), "grid            %d %s = tp %d x dp %d on %lld node(s); %s\n", f.world_size,
                f.on_gpu ? "GPU ranks" : "CPU ranks", f.tp, f.dp, static_cast<long long>(f.nodes),
                f.device_names.substr(0, 60).c_str());
  card << line;
  std::snprintf(line, sizeof(line), "duration        %.1f s wall (%.1f s training, %.1f s evaluation)\n", wall_time_s,
                train_time_s, figure("eval_time_s"));
  card << line;
  card << cost_lines(f, wall_time_s);
  const std::string host_peak = gib_text(figure("peak_host_memory_bytes"));
  if (f.on_gpu) {
    std::snprintf(line, sizeof(line),
                  "memory          %s mean allocated (over ranks), %s peak allocated (max over GPUs); host peak "
                  "resident set %s (max over ranks)\n",
                  steps > 0 ? gib_text(figure("mean_memory_allocated_bytes")).c_str() : "n/a (no steps)",
                  steps > 0 ? gib_text(figure("peak_memory_bytes")).c_str() : "n/a", host_peak.c_str());
  } else {
    std::snprintf(line, sizeof(line),
                  "memory          host peak resident set %s (max over %d CPU ranks; no device memory)\n",
                  host_peak.c_str(), f.world_size);
  }
  card << line;
  card << energy_lines(f);
  // An evaluation-only run (or one stopped before its first step) trained for no time: its rates per step and per
  // second are not zero but unknown, and the card says why instead of printing NaN.
  const bool trained = steps > 0 && train_time_s > 0;
  if (trained) {
    std::snprintf(line, sizeof(line), "throughput      %.1f samples/s, %.0f tokens/s, %.3f s per step (%lld steps)\n",
                  figure("samples_total") / train_time_s, figure("tokens_total") / train_time_s,
                  figure("mean_step_time_s"), static_cast<long long>(steps));
  } else {
    std::snprintf(line, sizeof(line), "throughput      n/a (no training steps)\n");
  }
  card << line;
  std::snprintf(line, sizeof(line), "FLOPs           %.3e model FLOPs in total, MFU %s\n", figure("total_flops"),
                !trained                        ? "n/a (no training steps)"
                : f.peak_flops_per_device > 0 ? (std::to_string(100.0 * figure("mean_mfu")) + "%").c_str()
                                              : "n/a (no peak known for this device)");
  card << line;
  if (trained) {
    std::snprintf(line, sizeof(line), "telemetry       %.0f us per step, %.3f%% of the step time\n",
                  1e6 * f.telemetry_time_s / static_cast<double>(steps), 100.0 * f.telemetry_time_s / train_time_s);
  } else {
    std::snprintf(line, sizeof(line), "telemetry       n/a (no training steps)\n");
  }
  card << line;
  card << "run file        " << f.run_file_path << "\n";
  return card.str();
}

}  // namespace t5scale
