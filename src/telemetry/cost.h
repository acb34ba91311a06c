// What a run costs and how well it used the hardware: the formulas of the run file's spec, and the table of
// peak FLOP/s by GPU name that model FLOPs utilisation (MFU) is measured against.
//
//   energy_kwh = (gpu_j + cpu_j) / 3.6e6 * pue
//   co2_kg     = energy_kwh * carbon_intensity_g_per_kwh / 1000
//   cost_usd   = price_per_node_hour_usd * nodes * node_share_fraction * wall_time_s / 3600, or
//                price_per_gpu_hour_usd * allocated_gpus_per_node * nodes * wall_time_s / 3600 (core/charging.h)
//   mfu        = model_flops_per_step / (step_time_s * peak_flops_per_device * devices)
//
// Documented defaults (config keys cost.*): no price (cost unknown: NaN, never 0), carbon intensity 475 g/kWh (the
// world average that CodeCarbon uses), PUE 1.0 (the hardware alone, no data-centre overhead).
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "core/charging.h"

namespace t5scale {

inline constexpr double kJoulesPerKwh = 3.6e6;
inline constexpr double kDefaultCarbonIntensityGPerKwh = 475.0;
inline constexpr double kDefaultPue = 1.0;

double energy_kwh(double gpu_energy_j, double cpu_energy_j, double pue);
double co2_kg(double energy_kwh, double carbon_intensity_g_per_kwh);

// The share of its node a job holds, from what Slurm (or the launch) says it holds and what the node has.
struct NodeShareInputs {
  bool on_gpu = false;
  int64_t ranks_on_node = 1;           // the job's ranks on the node (one GPU each on a GPU job)
  std::string slurm_gpus_on_node;      // $SLURM_GPUS_ON_NODE; "" = not set
  std::string cuda_visible_devices;    // $CUDA_VISIBLE_DEVICES; "" = not set
  int64_t node_gpus = 0;               // GPUs the node has; 0 = unknown
  std::string node_gpus_source;        // where node_gpus comes from, for the basis ("cost.node_gpus", "NVML")
  std::string slurm_cpus_on_node;      // $SLURM_CPUS_ON_NODE; "" = not set
  int64_t node_cpus = 0;               // the node's online CPUs; 0 = unknown
};
struct NodeShare {
  double fraction = std::numeric_limits<double>::quiet_NaN();  // held / the node's; NaN unknown
  int64_t allocated_gpus_per_node = 0;                          // 0 on a CPU job
  std::string basis;  // "1 of 4 GPUs (held: SLURM_GPUS_ON_NODE; the node's: cost.node_gpus)", or why unknown
};
// GPUs held: $SLURM_GPUS_ON_NODE, else the devices $CUDA_VISIBLE_DEVICES lists, else the job's ranks on the node;
// over the node's GPUs. On a CPU job: $SLURM_CPUS_ON_NODE over the node's CPUs, and outside Slurm the whole node
// (nothing else holds a share of it).
NodeShare node_share(const NodeShareInputs& inputs);

// NaN when the peak is unknown (0) or the step took no time: MFU is never guessed.
double model_flops_utilization(double model_flops_per_step, double step_time_s, double peak_flops_per_device,
                               int64_t devices);

// Dense (no sparsity) peak FLOP/s of one device for a run's precision ("bf16", "fp16", "fp32"), from NVIDIA's
// datasheets, found by a model name in the device name as NVML/CUDA report it ("NVIDIA H100 80GB HBM3",
// "Tesla V100-SXM2-16GB"). bf16/fp16 are tensor-core figures; fp32 is the plain FP32 rate (LibTorch does not use
// TF32 for fp32 matrix products by default). 0 when the device or precision is unknown, and for bf16 on GPUs
// without bf16 tensor cores (V100, T4).
double peak_flops_per_device(const std::string& device_name, const std::string& precision);
// The config's telemetry.peak_flops_per_device when it is > 0, the table's figure otherwise.
double resolve_peak_flops_per_device(double configured_flops, const std::string& device_name,
                                     const std::string& precision);

}  // namespace t5scale
