// The resource card a run prints at its end: duration, cost, memory, energy, emissions, throughput, FLOPs and the
// recording's own cost, from figures alone (a pure function: the run record gathers them).
#pragma once

#include <cstdint>
#include <string>

#include "core/units.h"  // gib_text
#include "telemetry/step_record.h"

namespace t5scale {

struct ResourceCardFigures {
  std::string run_name, status;           // "completed", "preempted", ...
  int world_size = 1, tp = 1, dp = 1;
  int64_t nodes = 1;
  bool on_gpu = false;
  std::string device_names;               // comma-separated, one per rank
  double wall_time_s = 0.0, train_time_s = 0.0, eval_time_s = 0.0;
  double price_per_node_hour_usd = 0.0, low_priority_price_per_node_hour_usd = 0.0;
  double host_peak_bytes = 0.0;           // max over ranks
  std::string gpu_energy_source, cpu_energy_source;  // "none": not measured
  double gpu_energy_j = 0.0, cpu_energy_j = 0.0;  // summed over the ranks that read a value
  double estimated_energy_j = 0.0;  // where neither source measured: the estimate (telemetry/energy_estimate.h)
  std::string energy_estimate_method;
  double pue = 1.0, carbon_intensity_g_per_kwh = 0.0;
  StepTotals totals;  // over the run's steps, every attempt's
  double peak_flops_per_device = 0.0;
  double telemetry_time_s = 0.0;          // spent recording, over the attempt
  std::string run_file_path;
};

std::string resource_card(const ResourceCardFigures& figures);

}  // namespace t5scale
