// The energy of a run that no meter measured (no NVML, no RAPL), estimated as CodeCarbon does in its "constant"
// mode, and kept apart from measured joules (the run file's estimated_energy_kwh, never energy_kwh):
//   CPU     half the package's TDP (CodeCarbon's constant mode), TDP from a table by model name, 85 W per socket
//           where the model is unknown (CodeCarbon's default), times the sockets
//   memory  3 W per 8 GB of the node's RAM (CodeCarbon's rule, 0.375 W/GB)
//   GPU     each GPU at its TDP from a table (an upper bound: without NVML its utilisation is not known)
// over the run's wall time, on every node alike (the node that writes the run file is taken for all of them).
#pragma once

#include <cstdint>
#include <string>

namespace t5scale {

struct HostHardware {
  std::string cpu_model = "cpu";  // /proc/cpuinfo's model name
  int64_t sockets = 1;            // distinct physical ids
  double memory_bytes = 0.0;      // physical RAM
};

// This host's, from /proc/cpuinfo and sysconf.
HostHardware read_host_hardware();
// Parses /proc/cpuinfo's text (model name, physical id).
HostHardware parse_cpuinfo(const std::string& cpuinfo_text, double memory_bytes);

// Thermal design power in W of one CPU package or GPU, from a table by model name as /proc/cpuinfo, NVML or CUDA
// name it; 0 when the model is unknown.
double cpu_tdp_w(const std::string& cpu_model);
double gpu_tdp_w(const std::string& gpu_name);

struct EnergyEstimate {
  double energy_j = 0.0;  // over all nodes, before PUE
  double power_w = 0.0;   // of all nodes together
  std::string method;     // how, with the figures: "CodeCarbon constant mode: CPU 0.5 x 270 W x 2 sockets, ..."
};

// The estimate for `nodes` nodes like `host`, each with `gpus_per_node` GPUs named `gpu_name` (0 or "" on CPU
// ranks), over wall_time_s.
EnergyEstimate estimate_unmeasured_energy(const HostHardware& host, int64_t nodes, int64_t gpus_per_node,
                                          const std::string& gpu_name, double wall_time_s);

}  // namespace t5scale
