// What one rank measures of itself at each step, for the run file's per-rank columns: the CUDA allocator's memory,
// the host's peak resident set, GPU power and energy (NVML) and CPU package energy (RAPL). RAPL counts the whole
// package, so only the first rank of each node reads it; the others report NaN and the summary counts each node
// once. Not collective: the hosts come from the one gather at start (world_hosts()).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "telemetry/energy_meter.h"
#include "telemetry/run_file.h"

namespace t5scale {

class StepMeter {
 public:
  // `notes` receives what the meter factories say about a meter they could not open.
  StepMeter(const TelemetrySettings& settings, torch::Device device, int world_rank,
            const std::vector<std::string>& world_hosts, std::vector<std::string>* notes);
  // This rank's readings, as `row`'s per-rank columns (each_rank in T5SCALE_STEP_FIELDS) of one value each: the
  // CUDA allocator's bytes (NaN on the CPU), the peak resident set so far, GPU power, and GPU and CPU energy since
  // the meter started (CPU: NaN on ranks that are not their node's first). fresh: the energy meters read their
  // source now rather than their newest background sample.
  void measure(StepRecord& row, bool fresh = false);
  std::string gpu_energy_source() const { return gpu_meter_->source(); }
  std::string cpu_energy_source() const { return cpu_meter_->source(); }

 private:
  torch::Device device_;
  std::unique_ptr<EnergyMeter> gpu_meter_, cpu_meter_;
};

}  // namespace t5scale
