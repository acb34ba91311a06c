#include "telemetry/cost.h"

#include <cctype>
#include <limits>
#include <vector>

namespace t5scale {

double energy_kwh(double gpu_energy_j, double cpu_energy_j, double pue) {
  return (gpu_energy_j + cpu_energy_j) / kJoulesPerKwh * pue;
}

double co2_kg(double energy_kwh, double carbon_intensity_g_per_kwh) {
  return energy_kwh * carbon_intensity_g_per_kwh / 1000.0;
}

double cost_usd(double price_per_node_hour_usd, int64_t nodes, double wall_time_s) {
  return price_per_node_hour_usd * static_cast<double>(nodes) * wall_time_s / 3600.0;
}

double model_flops_utilization(double model_flops_per_step, double step_time_s, double peak_flops_per_device,
                               int64_t devices) {
  if (!(peak_flops_per_device > 0) || !(step_time_s > 0) || devices < 1) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return model_flops_per_step / (step_time_s * peak_flops_per_device * static_cast<double>(devices));
}

namespace {

struct PeakEntry {
  std::vector<std::string> tokens;  // every one must be a word of the device name (upper case)
  double half_precision_flops;      // dense bf16/fp16 tensor cores
  double bf16_flops;                // 0 where the GPU has no bf16 tensor cores
  double fp32_flops;                // plain FP32 (no TF32)
};

// Most specific first: "H100 PCIe" before "H100". Figures: NVIDIA datasheets, dense (half the sparsity figure).
const std::vector<PeakEntry>& peak_table() {
  static const std::vector<PeakEntry> table = {
      {{"H100", "PCIE"}, 756e12, 756e12, 51.2e12},
      {{"H100", "NVL"}, 835.5e12, 835.5e12, 60e12},
      {{"H100"}, 989.4e12, 989.4e12, 66.9e12},  // SXM5 ("NVIDIA H100 80GB HBM3")
      {{"GH200"}, 989.4e12, 989.4e12, 66.9e12},  // its GPU is an H100 SXM-class part
      {{"H200", "NVL"}, 835.5e12, 835.5e12, 60e12},
      {{"H200"}, 989.4e12, 989.4e12, 66.9e12},
      {{"A100"}, 312e12, 312e12, 19.5e12},
      {{"A10"}, 125e12, 125e12, 31.2e12},  // the word A10 alone: not A100, not A10G
      {{"V100S"}, 130e12, 0, 16.4e12},
      {{"V100", "PCIE"}, 112e12, 0, 14e12},
      {{"V100"}, 125e12, 0, 15.7e12},  // SXM2
      {{"L40S"}, 362.05e12, 362.05e12, 91.6e12},
      {{"L4"}, 121e12, 121e12, 30.3e12},
      {{"T4"}, 65e12, 0, 8.1e12},
  };
  return table;
}

// Upper-cased words of a device name, split at anything not a letter or digit: "Tesla V100-SXM2-16GB" ->
// TESLA, V100, SXM2, 16GB. Whole words keep "A10" from matching "A100" and "L4" from matching "L40S".
std::vector<std::string> name_words(const std::string& name) {
  std::vector<std::string> words;
  std::string word;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      word += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    } else if (!word.empty()) {
      words.push_back(word);
      word.clear();
    }
  }
  if (!word.empty()) words.push_back(word);
  return words;
}

}  // namespace

double peak_flops_per_device(const std::string& device_name, const std::string& precision) {
  const std::vector<std::string> words = name_words(device_name);
  auto has_word = [&](const std::string& token) {
    for (const auto& word : words) {
      if (word == token) return true;
    }
    return false;
  };
  for (const auto& entry : peak_table()) {
    bool all = true;
    for (const auto& token : entry.tokens) all = all && has_word(token);
    if (!all) continue;
    if (precision == "bf16") return entry.bf16_flops;
    if (precision == "fp16") return entry.half_precision_flops;
    if (precision == "fp32") return entry.fp32_flops;
    return 0.0;
  }
  return 0.0;
}

double resolve_peak_flops_per_device(double configured_flops, const std::string& device_name,
                                     const std::string& precision) {
  if (configured_flops > 0) return configured_flops;
  return peak_flops_per_device(device_name, precision);
}

}  // namespace t5scale
