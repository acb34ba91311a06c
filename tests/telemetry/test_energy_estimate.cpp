// The energy estimate where nothing measured: CodeCarbon's constant mode by hand on named hardware, the host read
// from /proc/cpuinfo's text, and the run file keeping the estimate apart from measured joules.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "telemetry/energy_estimate.h"

namespace t5scale {
namespace {

TEST(EnergyEstimate, ConstantModeByHand) {
  // Two EPYC 7763 sockets (280 W each), 512 GB, eight A100-SXM4 (400 W each), 2 nodes, one hour.
  HostHardware host;
  host.cpu_model = "AMD EPYC 7763 64-Core Processor";
  host.sockets = 2;
  host.memory_bytes = 512e9;
  const EnergyEstimate e = estimate_unmeasured_energy(host, 2, 8, "NVIDIA A100-SXM4-80GB", 3600.0);
  const double per_node_w = 0.5 * 280.0 * 2 + 3.0 / 8.0 * 512.0 + 8 * 400.0;
  EXPECT_DOUBLE_EQ(e.power_w, 2 * per_node_w);
  EXPECT_DOUBLE_EQ(e.energy_j, 2 * per_node_w * 3600.0);
  EXPECT_NE(e.method.find("CPU 0.5 x 280 W TDP (AMD EPYC 7763"), std::string::npos) << e.method;
  EXPECT_NE(e.method.find("GPU 8 x 400 W TDP"), std::string::npos) << e.method;
  EXPECT_NE(e.method.find("upper bound"), std::string::npos) << e.method;

  // An unknown CPU is CodeCarbon's 85 W, and CPU ranks count no GPU.
  host.cpu_model = "AMD EPYC";
  host.sockets = 1;
  host.memory_bytes = 8e9;
  const EnergyEstimate cpu = estimate_unmeasured_energy(host, 1, 0, "", 10.0);
  EXPECT_DOUBLE_EQ(cpu.energy_j, (0.5 * 85.0 + 3.0) * 10.0);
  EXPECT_NE(cpu.method.find("model unknown: AMD EPYC, CodeCarbon's 85 W"), std::string::npos) << cpu.method;
  EXPECT_EQ(cpu.method.find("GPU"), std::string::npos) << cpu.method;

  // A GPU missing from the table is said so and not counted.
  const EnergyEstimate unknown_gpu = estimate_unmeasured_energy(host, 1, 1, "Mystery Accelerator", 10.0);
  EXPECT_DOUBLE_EQ(unknown_gpu.energy_j, cpu.energy_j);
  EXPECT_NE(unknown_gpu.method.find("GPU unknown (Mystery Accelerator"), std::string::npos) << unknown_gpu.method;
}

TEST(EnergyEstimate, TablesMatchTheMostSpecificName) {
  EXPECT_EQ(gpu_tdp_w("NVIDIA H100 80GB HBM3"), 700.0);
  EXPECT_EQ(gpu_tdp_w("NVIDIA H100 PCIe"), 350.0);
  EXPECT_EQ(gpu_tdp_w("NVIDIA A10G"), 150.0);       // not the A100's
  EXPECT_EQ(gpu_tdp_w("NVIDIA L40S"), 350.0);       // not the L4's
  EXPECT_EQ(gpu_tdp_w("Tesla V100-PCIE-32GB"), 250.0);
  EXPECT_EQ(gpu_tdp_w("cpu"), 0.0);
  EXPECT_EQ(cpu_tdp_w("Intel(R) Xeon(R) Platinum 8480C"), 350.0);
  EXPECT_EQ(cpu_tdp_w("AMD EPYC"), 0.0);
}

TEST(EnergyEstimate, SocketsAreTheDistinctPhysicalIds) {
  const std::string text =
      "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz\nphysical id\t: 0\n\n"
      "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz\nphysical id\t: 1\n\n"
      "processor\t: 2\nmodel name\t: Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz\nphysical id\t: 1\n";
  const HostHardware host = parse_cpuinfo(text, 1e9);
  EXPECT_EQ(host.cpu_model, "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz");
  EXPECT_EQ(host.sockets, 2);
  EXPECT_EQ(parse_cpuinfo("processor\t: 0\n", 1e9).sockets, 1);  // no physical id (a VM): one socket
  EXPECT_GT(read_host_hardware().memory_bytes, 0.0);
}

}  // namespace
}  // namespace t5scale
