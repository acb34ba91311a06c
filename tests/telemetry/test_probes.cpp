// Probes and figures: host memory against the kernel's own getrusage, the step timer, UTC time strings, the
// peak-FLOPs table on device names as NVML reports them, and the cost, carbon and MFU formulas.
#include <sys/resource.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "support/base_test_support.h"
#include "telemetry/cost.h"
#include "telemetry/probes.h"

namespace t5scale {
namespace {

using testing::error_of;

TEST(TelemetryProbes, ParsesProcStatus) {
  const std::string text =
      "Name:\tt5scale-train\nVmPeak:\t  900000 kB\nVmHWM:\t   524288 kB\nVmRSS:\t   262144 kB\nThreads:\t4\n";
  const HostMemory memory = parse_proc_status(text, "status");
  EXPECT_EQ(memory.rss_bytes, 262144LL * 1024);
  EXPECT_EQ(memory.peak_rss_bytes, 524288LL * 1024);
  EXPECT_NE(error_of([] { parse_proc_status("Name:\tx\n", "fake/status"); }).find("fake/status: no VmRSS or VmHWM"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_proc_status("VmRSS:\t12 MB\nVmHWM:\t1 kB\n", "s"); }).find("cannot read 'VmRSS'"),
            std::string::npos);
  EXPECT_NE(error_of([] { read_host_memory("/no/such/status"); }).find("/no/such/status: cannot open"),
            std::string::npos);
}

TEST(TelemetryProbes, ParsesMeminfo) {
  const std::string text = "MemTotal:       24576000 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\n";
  const NodeMemory memory = parse_meminfo(text, "meminfo");
  EXPECT_EQ(memory.total_bytes, 24576000LL * 1024);
  EXPECT_EQ(memory.available_bytes, 20000000LL * 1024);
  EXPECT_NE(error_of([] { parse_meminfo("MemTotal: 1 kB\nMemFree: 1 kB\n", "fake/meminfo"); })
                .find("fake/meminfo: no MemTotal or MemAvailable"),
            std::string::npos);
  EXPECT_NE(error_of([] { read_node_memory("/no/such/meminfo"); }).find("/no/such/meminfo: cannot open"),
            std::string::npos);
  // This machine's: something available, no more than it has.
  const NodeMemory here = read_node_memory();
  EXPECT_GT(here.available_bytes, 0);
  EXPECT_LE(here.available_bytes, here.total_bytes);
}

TEST(TelemetryProbes, HostMemoryFollowsTheProcess) {
  const HostMemory before = read_host_memory();
  constexpr size_t kBytes = 64 << 20;
  std::unique_ptr<char[]> block(new char[kBytes]);
  std::memset(block.get(), 1, kBytes);  // touched: resident
  const HostMemory after = read_host_memory();
  struct rusage usage {};
  ASSERT_EQ(getrusage(RUSAGE_SELF, &usage), 0);
  // The kernel folds per-thread RSS counters in every 64 page faults: a few hundred KiB of slack per thread.
  EXPECT_GE(after.rss_bytes - before.rss_bytes, int64_t{60} << 20);
  EXPECT_GE(after.peak_rss_bytes, after.rss_bytes);
  EXPECT_NEAR(static_cast<double>(after.peak_rss_bytes), static_cast<double>(usage.ru_maxrss) * 1024, 4 << 20);
  EXPECT_EQ(block[kBytes - 1], 1);
}

TEST(TelemetryProbes, PeakFlopsByDeviceName) {
  EXPECT_EQ(peak_flops_per_device("NVIDIA H100 80GB HBM3", "bf16"), 989.4e12);
  EXPECT_EQ(peak_flops_per_device("NVIDIA H100 80GB HBM3", "fp32"), 66.9e12);
  EXPECT_EQ(peak_flops_per_device("NVIDIA H100 PCIe", "bf16"), 756e12);
  EXPECT_EQ(peak_flops_per_device("NVIDIA H100 NVL", "bf16"), 835.5e12);
  EXPECT_EQ(peak_flops_per_device("NVIDIA H200", "bf16"), 989.4e12);
  EXPECT_EQ(peak_flops_per_device("NVIDIA GH200 480GB", "fp16"), 989.4e12);
  EXPECT_EQ(peak_flops_per_device("NVIDIA A100-SXM4-80GB", "bf16"), 312e12);
  EXPECT_EQ(peak_flops_per_device("NVIDIA A100-PCIE-40GB", "fp32"), 19.5e12);
  EXPECT_EQ(peak_flops_per_device("NVIDIA A10", "fp16"), 125e12);
  EXPECT_EQ(peak_flops_per_device("NVIDIA A10G", "fp16"), 0.0);  // a different part: unknown, not the A10's
  EXPECT_EQ(peak_flops_per_device("Tesla V100-SXM2-16GB", "fp16"), 125e12);
  EXPECT_EQ(peak_flops_per_device("Tesla V100-SXM2-16GB", "bf16"), 0.0);  // no bf16 tensor cores
  EXPECT_EQ(peak_flops_per_device("Tesla V100-PCIE-32GB", "fp16"), 112e12);
  EXPECT_EQ(peak_flops_per_device("NVIDIA L40S", "bf16"), 362.05e12);
  EXPECT_EQ(peak_flops_per_device("NVIDIA L4", "bf16"), 121e12);
  EXPECT_EQ(peak_flops_per_device("Tesla T4", "fp16"), 65e12);
  EXPECT_EQ(peak_flops_per_device("Tesla T4", "fp32"), 8.1e12);
  EXPECT_EQ(peak_flops_per_device("cpu", "fp32"), 0.0);
  EXPECT_EQ(peak_flops_per_device("NVIDIA H100 80GB HBM3", "fp8"), 0.0);
  EXPECT_EQ(resolve_peak_flops_per_device(0.0, "NVIDIA A100-SXM4-80GB", "bf16"), 312e12);
  EXPECT_EQ(resolve_peak_flops_per_device(100e12, "NVIDIA A100-SXM4-80GB", "bf16"), 100e12);
}

TEST(TelemetryProbes, CostCarbonAndMfuFormulas) {
  // 1 kWh of GPU + half a kWh of CPU, PUE 1.2: 1.8 kWh; at 475 g/kWh: 0.855 kg.
  EXPECT_DOUBLE_EQ(energy_kwh(3.6e6, 1.8e6, 1.2), 1.8);
  EXPECT_DOUBLE_EQ(co2_kg(1.8, kDefaultCarbonIntensityGPerKwh), 0.855);
  Charging whole;
  whole.price_per_node_hour_usd = 2.5;
  whole.nodes = 4;
  whole.node_share_fraction = 1.0;
  EXPECT_EQ(cost_usd(whole, 5400.0), 15.0);  // 4 nodes x 1.5 h x 2.5 $
  Charging unpriced = whole;
  unpriced.price_per_node_hour_usd = 0.0;
  EXPECT_TRUE(std::isnan(cost_usd(unpriced, 5400.0)));  // no price: unknown, never 0
  EXPECT_DOUBLE_EQ(model_flops_utilization(4e15, 2.0, 1e15, 4), 0.5);
  EXPECT_TRUE(std::isnan(model_flops_utilization(4e15, 2.0, 0.0, 4)));
  EXPECT_TRUE(std::isnan(model_flops_utilization(4e15, 0.0, 1e15, 4)));
}

// A job on part of a node is charged its share of the node's price: 1 of 4 GPUs, a quarter. At a price per
// GPU-hour, its GPUs. What it does not know it does not guess.
TEST(TelemetryProbes, CostIsTheShareOfTheNodeTheJobHolds) {
  Charging quarter;
  quarter.price_per_node_hour_usd = 16.0;
  quarter.nodes = 1;
  quarter.node_share_fraction = 0.25;
  quarter.allocated_gpus_per_node = 1;
  EXPECT_DOUBLE_EQ(cost_usd(quarter, 7200.0), 8.0);  // 16 $ x 1/4 x 2 h
  EXPECT_DOUBLE_EQ(charged_nodes(quarter), 0.25);
  Charging per_gpu = quarter;
  per_gpu.price_per_node_hour_usd = 0.0;
  per_gpu.price_per_gpu_hour_usd = 4.5;
  per_gpu.nodes = 2;
  per_gpu.allocated_gpus_per_node = 4;
  EXPECT_DOUBLE_EQ(cost_usd(per_gpu, 3600.0), 36.0);  // 8 GPUs x 1 h x 4.5 $
  per_gpu.allocated_gpus_per_node = 0;  // a CPU job has no GPU to price
  EXPECT_TRUE(std::isnan(cost_usd(per_gpu, 3600.0)));
  Charging unknown_share = quarter;
  unknown_share.node_share_fraction = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(cost_usd(unknown_share, 3600.0)));
}

TEST(TelemetryProbes, TheNodeShareComesFromSlurmTheVisibleDevicesOrTheRanks) {
  NodeShareInputs in;
  in.on_gpu = true;
  in.ranks_on_node = 1;
  in.node_gpus = 4;
  in.node_gpus_source = "NVML";
  in.slurm_gpus_on_node = "1";
  NodeShare share = node_share(in);
  EXPECT_DOUBLE_EQ(share.fraction, 0.25);
  EXPECT_EQ(share.allocated_gpus_per_node, 1);
  EXPECT_EQ(share.basis, "1 of 4 GPUs (held: SLURM_GPUS_ON_NODE; the node's: NVML)");
  // Slurm allocates what the job holds, whether its ranks use it all or not.
  in.slurm_gpus_on_node = "2";
  EXPECT_DOUBLE_EQ(node_share(in).fraction, 0.5);
  in.slurm_gpus_on_node = "";
  in.cuda_visible_devices = "0,3";
  share = node_share(in);
  EXPECT_DOUBLE_EQ(share.fraction, 0.5);
  EXPECT_EQ(share.basis, "2 of 4 GPUs (held: CUDA_VISIBLE_DEVICES; the node's: NVML)");
  in.cuda_visible_devices = "";
  in.ranks_on_node = 4;
  share = node_share(in);
  EXPECT_DOUBLE_EQ(share.fraction, 1.0);
  EXPECT_EQ(share.basis, "4 of 4 GPUs (held: one per rank on the node; the node's: NVML)");
  // The node's GPUs uncounted, or fewer than the job holds: unknown, with the key that tells them.
  in.node_gpus = 0;
  share = node_share(in);
  EXPECT_TRUE(std::isnan(share.fraction));
  EXPECT_EQ(share.basis, "unknown: 4 GPUs held (one per rank on the node) of a node whose GPUs were not counted "
                         "(set cost.node_gpus)");
  in.node_gpus = 2;
  in.node_gpus_source = "cost.node_gpus";
  EXPECT_TRUE(std::isnan(node_share(in).fraction));
  EXPECT_EQ(node_share(in).basis, "unknown: 4 GPUs held (one per rank on the node), more than the node's 2 "
                                  "(cost.node_gpus): set cost.node_gpus");
  // A CPU job: the CPUs Slurm gives it of the node's, and outside Slurm the whole node.
  NodeShareInputs cpu;
  cpu.node_cpus = 64;
  cpu.slurm_cpus_on_node = "16";
  share = node_share(cpu);
  EXPECT_DOUBLE_EQ(share.fraction, 0.25);
  EXPECT_EQ(share.allocated_gpus_per_node, 0);
  EXPECT_EQ(share.basis, "16 of 64 CPUs (held: SLURM_CPUS_ON_NODE; the node's: online CPUs)");
  cpu.slurm_cpus_on_node = "";
  EXPECT_DOUBLE_EQ(node_share(cpu).fraction, 1.0);
  // A node declared to Slurm with more CPUs than it has (the local test cluster's): the job holds all of it.
  cpu.node_cpus = 2;
  cpu.slurm_cpus_on_node = "4";
  EXPECT_DOUBLE_EQ(node_share(cpu).fraction, 1.0);
  EXPECT_EQ(node_share(cpu).basis, "the whole node (4 CPUs held by SLURM_CPUS_ON_NODE, of 2 online)");
}

}  // namespace
}  // namespace t5scale
