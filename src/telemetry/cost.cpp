#include "telemetry/cost.h"

#include <cctype>
#include <limits>
#include <vector>

#include "core/check.h"

namespace t5scale {

double energy_kwh(double gpu_energy_j, double cpu_energy_j, double pue) {
  return (gpu_energy_j + cpu_energy_j) / kJoulesPerKwh * pue;
}

double co2_kg(double energy_kwh, double carbon_intensity_g_per_kwh) {
  return energy_kwh * carbon_intensity_g_per_kwh / 1000.0;
}

namespace {

// A count from an environment variable's text ("4", "4(x2)" as Slurm writes repeated counts); 0 when it is none.
int64_t count_of(const std::string& text) {
  int64_t value = 0;
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) value = value * 10 + (text[i++] - '0');
  return i == 0 ? 0 : value;
}

// The devices a CUDA_VISIBLE_DEVICES value lists ("0,1" -> 2; "" -> 0).
int64_t listed_devices(const std::string& text) {
  if (text.empty()) return 0;
  int64_t n = 1;
  for (char c : text) n += c == ',' ? 1 : 0;
  return n;
}

}  // namespace

NodeShare node_share(const NodeShareInputs& in) {
  NodeShare share;
  if (!in.on_gpu) {
    const int64_t held = count_of(in.slurm_cpus_on_node);
    if (held <= 0) {
      share.fraction = 1.0;
      share.basis = "the whole node (a CPU job outside a Slurm allocation: SLURM_CPUS_ON_NODE is not set)";
    } else if (in.node_cpus <= 0) {
      share.basis = msg("unknown: ", held, " CPUs held (SLURM_CPUS_ON_NODE) of a node whose CPUs were not counted");
    } else if (held > in.node_cpus) {
      // Slurm gave the job more CPUs than the node has online (a node declared larger than it is): it holds all.
      share.fraction = 1.0;
      share.basis = msg("the whole node (", held, " CPUs held by SLURM_CPUS_ON_NODE, of ", in.node_cpus, " online)");
    } else {
      share.fraction = static_cast<double>(held) / static_cast<double>(in.node_cpus);
      share.basis = msg(held, " of ", in.node_cpus, " CPUs (held: SLURM_CPUS_ON_NODE; the node's: online CPUs)");
    }
    return share;
  }
  std::string held_source;
  int64_t held = count_of(in.slurm_gpus_on_node);
  if (held > 0) {
    held_source = "SLURM_GPUS_ON_NODE";
  } else if ((held = listed_devices(in.cuda_visible_devices)) > 0) {
    held_source = "CUDA_VISIBLE_DEVICES";
  } else {
    held = in.ranks_on_node;
    held_source = "one per rank on the node";
  }
  share.allocated_gpus_per_node = held;
  if (in.node_gpus <= 0) {
    share.basis = msg("unknown: ", held, " GPUs held (", held_source,
                      ") of a node whose GPUs were not counted (set cost.node_gpus)");
  } else if (held > in.node_gpus) {
    share.basis = msg("unknown: ", held, " GPUs held (", held_source, "), more than the node's ", in.node_gpus, " (",
                      in.node_gpus_source, "): set cost.node_gpus");
  } else {
    share.fraction = static_cast<double>(held) / static_cast<double>(in.node_gpus);
    share.basis = msg(held, " of ", in.node_gpus, " GPUs (held: ", held_source, "; the node's: ", in.node_gpus_source,
                      ")");
  }
  return share;
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
