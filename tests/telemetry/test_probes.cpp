// Probes and figures: host memory against the kernel's own getrusage, the step timer, UTC time strings, the
// peak-FLOPs table on device names as NVML reports them, and the cost, carbon and MFU formulas.
#include <sys/resource.h>

#include <cmath>
#include <cstring>
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
  EXPECT_EQ(cost_usd(2.5, 4, 5400.0), 15.0);  // 4 nodes x 1.5 h x 2.5 $
  EXPECT_EQ(cost_usd(0.0, 4, 5400.0), 0.0);  // price unknown
  EXPECT_DOUBLE_EQ(model_flops_utilization(4e15, 2.0, 1e15, 4), 0.5);
  EXPECT_TRUE(std::isnan(model_flops_utilization(4e15, 2.0, 0.0, 4)));
  EXPECT_TRUE(std::isnan(model_flops_utilization(4e15, 0.0, 1e15, 4)));
}

}  // namespace
}  // namespace t5scale
