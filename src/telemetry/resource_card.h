// The resource card a run prints at its end: duration, cost, memory, energy, emissions, throughput, FLOPs and the
// recording's own cost. Its figures are the run file's final /summary (telemetry/run_summary.h: every attempt and
// every grid of the run); the card adds what /summary does not hold (the grid, the prices, the meters' names)
// and divides nothing it could read.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/hdf5_attributes.h"
#include "core/units.h"  // gib_text
#include "telemetry/cost.h"

namespace t5scale {

struct ResourceCardFigures {
  Hdf5Attributes summary;  // /summary's figures as RunFile::finish returns them
  std::string run_name;
  int world_size = 1, tp = 1, dp = 1;
  int64_t nodes = 1;
  bool on_gpu = false;
  std::string device_names;               // comma-separated, one per rank
  Charging charging;  // the prices, nodes, node share and GPUs held, as the run file records them
  std::string node_share_basis;  // how the node share was found (the run file's node_share_basis)
  double low_priority_price_per_node_hour_usd = 0.0;
  std::string gpu_energy_source, cpu_energy_source;  // "none": not measured
  double pue = 1.0, carbon_intensity_g_per_kwh = 0.0;
  double peak_flops_per_device = 0.0;
  double telemetry_time_s = 0.0;          // spent recording, over every attempt's steps
  std::string run_file_path;
};

std::string resource_card(const ResourceCardFigures& figures);

}  // namespace t5scale
