// What a run costs and how well it used the hardware: the formulas of the run file's spec, and the table of
// peak FLOP/s by GPU name that model FLOPs utilisation (MFU) is measured against.
//
//   energy_kwh = (gpu_j + cpu_j) / 3.6e6 * pue
//   co2_kg     = energy_kwh * carbon_intensity_g_per_kwh / 1000
//   cost_usd   = price_per_node_hour_usd * nodes * wall_time_s / 3600
//   mfu        = model_flops_per_step / (step_time_s * peak_flops_per_device * devices)
//
// Documented defaults (config keys cost.*): price 0 (unknown, so cost 0), carbon intensity 475 g/kWh (the world
// average that CodeCarbon uses), PUE 1.0 (the hardware alone, no data-centre overhead).
#pragma once

#include <cstdint>
#include <string>

namespace t5scale {

inline constexpr double kJoulesPerKwh = 3.6e6;
inline constexpr double kDefaultCarbonIntensityGPerKwh = 475.0;
inline constexpr double kDefaultPue = 1.0;

double energy_kwh(double gpu_energy_j, double cpu_energy_j, double pue);
double co2_kg(double energy_kwh, double carbon_intensity_g_per_kwh);
double cost_usd(double price_per_node_hour_usd, int64_t nodes, double wall_time_s);
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
