#include "telemetry/energy_estimate.h"

#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "core/check.h"

namespace t5scale {
namespace {

// CodeCarbon's constant mode: a CPU whose power no tool reads draws half its TDP; an unknown model 85 W.
constexpr double kConstantModeLoad = 0.5;
constexpr double kUnknownCpuTdpW = 85.0;
// CodeCarbon: 3 W per 8 GB of RAM.
constexpr double kMemoryWPerGB = 3.0 / 8.0;

// Manufacturers' TDPs (W), matched as a substring of the model name, the most specific first.
const std::vector<std::pair<std::string, double>>& cpu_tdp_table() {
  static const std::vector<std::pair<std::string, double>> table = {
      {"Platinum 8481C", 350}, {"Platinum 8480", 350}, {"Platinum 8470", 350}, {"Platinum 8468", 350},
      {"Platinum 8380", 270},  {"Platinum 8375C", 300}, {"Platinum 8358", 250}, {"Platinum 8352", 205},
      {"Platinum 8280", 205},  {"Platinum 8275CL", 240}, {"Platinum 8259CL", 210}, {"Platinum 8175M", 240},
      {"Gold 6348", 235},      {"Gold 6338", 205},     {"Gold 6248", 150},     {"Gold 6230", 125},
      {"EPYC 9654", 360},      {"EPYC 9554", 360},     {"EPYC 9454", 290},     {"EPYC 7763", 280},
      {"EPYC 7J13", 280},      {"EPYC 7R13", 280},     {"EPYC 7742", 225},     {"EPYC 7713", 225},
      {"EPYC 7543", 225},      {"EPYC 7513", 200},     {"EPYC 7B12", 240},     {"EPYC 7V12", 240},
      {"Grace", 250},
  };
  return table;
}

const std::vector<std::pair<std::string, double>>& gpu_tdp_table() {
  static const std::vector<std::pair<std::string, double>> table = {
      {"GH200", 900}, {"B200", 1000}, {"H200", 700},   {"H100 PCIe", 350}, {"H100 NVL", 400}, {"H100", 700},
      {"A100-PCIE", 250}, {"A100 PCIe", 300}, {"A100", 400}, {"A40", 300}, {"A10G", 150}, {"A10", 150},
      {"L40S", 350},  {"L40", 300},   {"L4", 72},      {"V100-PCIE", 250}, {"V100", 300},   {"T4", 70},
  };
  return table;
}

double tdp_of(const std::vector<std::pair<std::string, double>>& table, const std::string& name) {
  for (const auto& [model, watts] : table) {
    if (name.find(model) != std::string::npos) return watts;
  }
  return 0.0;
}

}  // namespace

double cpu_tdp_w(const std::string& cpu_model) { return tdp_of(cpu_tdp_table(), cpu_model); }
double gpu_tdp_w(const std::string& gpu_name) { return tdp_of(gpu_tdp_table(), gpu_name); }

HostHardware parse_cpuinfo(const std::string& cpuinfo_text, double memory_bytes) {
  HostHardware host;
  host.memory_bytes = memory_bytes;
  std::set<std::string> physical_ids;
  std::istringstream in(cpuinfo_text);
  std::string line;
  auto value_of = [](const std::string& l) {
    const size_t colon = l.find(':');
    return colon == std::string::npos || colon + 2 > l.size() ? std::string() : l.substr(colon + 2);
  };
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0 && host.cpu_model == "cpu") host.cpu_model = value_of(line);
    if (line.rfind("physical id", 0) == 0) physical_ids.insert(value_of(line));
  }
  host.sockets = std::max<int64_t>(1, static_cast<int64_t>(physical_ids.size()));
  return host;
}

HostHardware read_host_hardware() {
  std::ifstream in("/proc/cpuinfo");
  std::stringstream text;
  text << in.rdbuf();
  const double memory_bytes = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  return parse_cpuinfo(text.str(), memory_bytes);
}

EnergyEstimate estimate_unmeasured_energy(const HostHardware& host, int64_t nodes, int64_t gpus_per_node,
                                          const std::string& gpu_name, double wall_time_s) {
  const double table_tdp = cpu_tdp_w(host.cpu_model);
  const double tdp = table_tdp > 0 ? table_tdp : kUnknownCpuTdpW;
  const double cpu_w = kConstantModeLoad * tdp * static_cast<double>(host.sockets);
  const double memory_gb = host.memory_bytes / 1e9;
  const double memory_w = kMemoryWPerGB * memory_gb;
  const double gpu_tdp = gpus_per_node > 0 ? gpu_tdp_w(gpu_name) : 0.0;
  const double gpu_w = gpu_tdp * static_cast<double>(gpus_per_node);
  EnergyEstimate estimate;
  estimate.power_w = (cpu_w + memory_w + gpu_w) * static_cast<double>(nodes);
  estimate.energy_j = estimate.power_w * wall_time_s;
  estimate.method = msg("CodeCarbon constant mode, per node: CPU 0.5 x ", tdp, " W TDP (",
                        table_tdp > 0 ? host.cpu_model : "model unknown: " + host.cpu_model + ", CodeCarbon's 85 W",
                        ") x ", host.sockets, " socket(s); memory 3 W per 8 GB x ", static_cast<int64_t>(memory_gb + 0.5),
                        " GB");
  if (gpus_per_node > 0) {
    estimate.method += gpu_tdp > 0 ? msg("; GPU ", gpus_per_node, " x ", gpu_tdp, " W TDP (", gpu_name,
                                         ", utilisation unknown: an upper bound)")
                                   : msg("; GPU unknown (", gpu_name, ": no TDP in the table, not counted)");
  }
  estimate.method += msg("; x ", nodes, " node(s) x ", wall_time_s, " s");
  return estimate;
}

}  // namespace t5scale
