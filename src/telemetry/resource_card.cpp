#include "telemetry/resource_card.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "telemetry/cost.h"

namespace t5scale {
std::string resource_card(const ResourceCardFigures& f) {
  const double kwh = energy_kwh(f.gpu_energy_j, f.cpu_energy_j, f.pue);
  const double steps = static_cast<double>(std::max<int64_t>(f.totals.steps, 1));
  const double step_time_sum_s = std::max(f.totals.step_time_s, 1e-12);
  std::ostringstream card;
  char line[256];
  card << "---- resource card: " << f.run_name << " (" << f.status << ") ----\n";
  std::snprintf(line, sizeof(line), "grid            %d %s = tp %d x dp %d on %lld node(s); %s\n", f.world_size,
                f.on_gpu ? "GPU ranks" : "CPU ranks", f.tp, f.dp, static_cast<long long>(f.nodes),
                f.device_names.substr(0, 60).c_str());
  card << line;
  std::snprintf(line, sizeof(line), "duration        %.1f s wall (%.1f s training, %.1f s evaluation)\n", f.wall_time_s,
                f.train_time_s, f.eval_time_s);
  card << line;
  auto price_line = [&](const char* label, const char* key, double price) {
    if (price > 0) {
      std::snprintf(line, sizeof(line), "%-15s %.4f USD (%.2f USD per node-hour x %lld node(s))\n", label,
                    cost_usd(price, f.nodes, f.wall_time_s), price, static_cast<long long>(f.nodes));
    } else {
      std::snprintf(line, sizeof(line), "%-15s unknown (cost.%s not set)\n", label, key);
    }
    card << line;
  };
  price_line("cost", "price_per_node_hour_usd", f.price_per_node_hour_usd);
  price_line("cost low-prio", "low_priority_price_per_node_hour_usd", f.low_priority_price_per_node_hour_usd);
  if (f.on_gpu) {
    std::snprintf(line, sizeof(line),
                  "memory          %s average allocated (rank 0), %s peak allocated (max over GPUs); host peak "
                  "resident set %s (max over ranks)\n",
                  f.totals.steps > 0 ? gib_text(f.totals.memory_allocated_sum_bytes / steps).c_str() : "n/a (no steps)",
                  f.totals.steps > 0 ? gib_text(f.totals.peak_memory_bytes).c_str() : "n/a",
                  gib_text(f.host_peak_bytes).c_str());
  } else {
    std::snprintf(line, sizeof(line),
                  "memory          host peak resident set %s (max over %d CPU ranks; no device memory)\n",
                  gib_text(f.host_peak_bytes).c_str(), f.world_size);
  }
  card << line;
  const bool gpu_known = f.gpu_energy_source != "none", cpu_known = f.cpu_energy_source != "none";
  std::snprintf(line, sizeof(line), "GPU energy      %s\n",
                gpu_known ? (std::to_string(f.gpu_energy_j / 1000.0) + " kJ (" + f.gpu_energy_source + ")").c_str()
                : f.on_gpu ? "not measured (no NVML)"
                           : "none (CPU ranks)");
  card << line;
  std::snprintf(line, sizeof(line), "CPU energy      %s\n",
                cpu_known ? (std::to_string(f.cpu_energy_j / 1000.0) + " kJ (RAPL)").c_str()
                          : "not measured (RAPL not readable)");
  card << line;
  if (gpu_known || cpu_known) {
    std::snprintf(line, sizeof(line),
                  "emissions       %.6f kg CO2eq (%.6f kWh x PUE %.2f x %.0f g/kWh; measured sources only)\n",
                  co2_kg(kwh, f.carbon_intensity_g_per_kwh), kwh / f.pue, f.pue, f.carbon_intensity_g_per_kwh);
    card << line;
  } else if (f.energy_estimate_method.empty()) {
    card << "emissions       unknown (no energy measured)\n";
  } else {
    // Nothing measured: unknown, and beside it an estimate that says it is one.
    const double estimated_kwh = energy_kwh(f.estimated_energy_j, 0.0, f.pue);
    std::snprintf(line, sizeof(line),
                  "emissions       unknown (no energy measured); estimated %.6f kg CO2eq (%.6f kWh x PUE %.2f x "
                  "%.0f g/kWh)\n",
                  co2_kg(estimated_kwh, f.carbon_intensity_g_per_kwh), estimated_kwh / f.pue, f.pue,
                  f.carbon_intensity_g_per_kwh);
    card << line << "energy estimate " << f.energy_estimate_method << "\n";
  }
  std::snprintf(line, sizeof(line), "throughput      %.1f samples/s, %.0f tokens/s, %.3f s per step (%lld steps)\n",
                static_cast<double>(f.totals.samples) / step_time_sum_s, static_cast<double>(f.totals.tokens) / step_time_sum_s,
                f.totals.step_time_s / steps, static_cast<long long>(f.totals.steps));
  card << line;
  std::snprintf(line, sizeof(line), "FLOPs           %.3e model FLOPs in total, MFU %s\n", f.totals.model_flops,
                f.peak_flops_per_device > 0 ? (std::to_string(100.0 * f.totals.mfu_sum / steps) + "%").c_str()
                                            : "n/a (no peak known for this device)");
  card << line;
  std::snprintf(line, sizeof(line), "telemetry       %.0f us per step, %.3f%% of the step time\n",
                1e6 * f.telemetry_time_s / steps, 100.0 * f.telemetry_time_s / step_time_sum_s);
  card << line;
  card << "run file        " << f.run_file_path << "\n";
  return card.str();
}

}  // namespace t5scale
