// `t5scale-bench --calibrate FILE`: the rates of the machine at hand (plan/machine_rates.h) for the step-time model.
//
// With one process it measures the device: matrix products by their smallest dimension (in the compute dtype),
// a copy's memory bandwidth, the host's memory bandwidth (a streaming triad on every core) and on a GPU its link to
// the host (a pinned device-to-host copy; without a GPU there is none to measure: a figure the file had stays, and
// the output says so), and from training steps of the tiny T5 the host's time per dispatched operator and the
// compute efficiency (on a CPU fitted over six sizes, from one row of 2 + 2 tokens to 64 of 32 + 32; on a GPU at
// the two ends). Under mpirun it measures the collectives of t5scale's own communicator among all of the job's
// ranks busy at once: all-reduces of 4 bytes (latency) and 4 MiB (bandwidth) on groups of every power of two up to
// the world, consecutive ranks inside a node, and one rank per node across nodes; on a CPU also the busy host's
// slowdown (the slowest rank's tiny step with every rank of the machine at once, against one rank alone) and
// whether the nodes are one machine's namespaces (their boot ids). These are merged into the file the one-process
// run wrote, keyed by ranks per node (per host) and group size, so that
//   t5scale-bench --calibrate rates.json --threads 1
//   mpirun -np 2 t5scale-bench --calibrate rates.json
//   mpirun -np 4 t5scale-bench --calibrate rates.json
// leaves one file with the device and the links at 2 and 4 ranks per node.
#pragma once

#include <torch/types.h>

#include <string>

#include "config/run_config.h"
#include "plan/machine_rates.h"

namespace t5scale {

struct CalibrationOptions {
  std::string path;  // the rates file, written (one process) or merged into (several)
  torch::Device device = torch::kCPU;
  RunConfig::Precision precision = RunConfig::Precision::kFp32;  // the products' dtype
  // Timed passes whose median each figure of the tiny T5's step keeps (--calibrate-passes): over the six sizes on a
  // CPU, and under mpirun the busy host's step alone and at once. 0: 3 and 5. Fewer is quicker and noisier.
  int passes = 0;
};

// Measures what this process's world measures (above) and writes the file from world rank 0. Returns the rates
// as written.
MachineRates calibrate_machine(const CalibrationOptions& options);

// The host's memory bandwidth, bytes per second, as STREAM's triad counts it (a[i] = b[i] + s c[i]: three arrays
// of `array_bytes` each read or written once a pass), with every hardware thread on its own slice, the best of
// `passes` timed passes (a machine's reach, not its noise). What the offloaded optimizer's update streams at:
// host_memory_bandwidth_bytes_per_s of the rates file (alone, --calibrate measures it over 3 x 128 MiB).
double measure_host_memory_bandwidth(int64_t array_bytes, int passes);

}  // namespace t5scale
