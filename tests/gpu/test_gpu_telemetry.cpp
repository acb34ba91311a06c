// What the run file measures on a GPU: NVML's energy counter for this rank's GPU advances at a plausible power
// while the GPU works, and a training job on CUDA records the caching allocator's peak in its run file.
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "config/run_config.h"
#include "core/hdf5_check.h"
#include "gpu/gpu_test_support.h"
#include "job/training_job.h"
#include "support/base_test_support.h"
#include "telemetry/nvml.h"
#include "train/device_probe.h"

namespace t5scale {
namespace {

using testing::gpu_grid;
using Clock = std::chrono::steady_clock;

// A GPU under matmul load draws well over the idle power of any data-centre GPU (H100: ~70 W idle, 700 W limit;
// A100 and V100 alike within these bounds), and no single GPU draws over 1.2 kW.
constexpr double kMinBusyPowerW = 30.0;
constexpr double kMaxPowerW = 1200.0;

std::string pci_bus_id(int device) {
  char bus_id[32] = {};
  const cudaError_t status = cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device);
  T5S_CHECK(status == cudaSuccess, "cudaDeviceGetPCIBusId: ", cudaGetErrorString(status));
  return bus_id;
}

TEST(GpuTelemetry, NvmlEnergyCounterAdvancesWhileTheGpuWorks) {
  const auto nvml = NvmlLibrary::load();
  NvmlEnergyMeter meter(nvml, nvml->device_index_of_pci_bus_id(pci_bus_id(gpu_grid().cuda_device)));
  EXPECT_EQ(meter.source(), "nvml_energy_counter") << "Volta and newer GPUs have the total-energy counter";
  const torch::Tensor a = torch::randn({4096, 4096}, torch::TensorOptions().device(gpu_grid().device()));
  torch::cuda::synchronize();
  meter.refresh();  // readings now, not the background thread's newest
  const std::optional<double> before_j = meter.read_j();
  const auto start = Clock::now();
  // Three seconds of matmuls: the counter updates every 20-100 ms.
  while (std::chrono::duration<double>(Clock::now() - start).count() < 3.0) {
    for (int i = 0; i < 20; ++i) a.mm(a);
    torch::cuda::synchronize();
  }
  const double elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  meter.refresh();
  const std::optional<double> after_j = meter.read_j();
  ASSERT_TRUE(before_j && after_j) << "NVML gave no energy reading";
  const double power_w = (*after_j - *before_j) / elapsed_s;
  std::printf("GPU energy: %.1f J over %.2f s of matmuls = %.0f W (%s)\n", *after_j - *before_j, elapsed_s, power_w,
              meter.device_name().c_str());
  EXPECT_GT(*after_j, *before_j);
  EXPECT_GT(power_w, kMinBusyPowerW);
  EXPECT_LT(power_w, kMaxPowerW);
}

std::vector<double> read_doubles(hid_t file, const std::string& dataset, const std::string& path) {
  const H5Handle set(H5_CHECK(H5Dopen2(file, dataset.c_str(), H5P_DEFAULT), path));
  const H5Handle space(H5_CHECK(H5Dget_space(set.get()), path));
  std::vector<double> values(static_cast<size_t>(H5_CHECK(H5Sget_simple_extent_npoints(space.get()), path)));
  H5_CHECK(H5Dread(set.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), path);
  return values;
}

int64_t read_int_attribute(hid_t file, const std::string& name, const std::string& path) {
  const H5Handle attribute(H5_CHECK(H5Aopen(file, name.c_str(), H5P_DEFAULT), path));
  int64_t value = 0;
  H5_CHECK(H5Aread(attribute.get(), H5T_NATIVE_INT64, &value), path);
  return value;
}

TEST(GpuTelemetry, TrainingJobRecordsTheCudaPeakMemoryInItsRunFile) {
  const testing::TempDir dir;
  RunConfig config = parse_run_config("model: {name: t5-small}\n", "the GPU test's config");
  apply_overrides(config, {"run.output_dir=" + dir.path().string(), "run.name=gpu_job", "precision=bf16",
                           "parallel.backend=nccl", "train.max_steps=6", "train.global_batch=16", "train.log_every=3",
                           "data.synthetic_examples=512", "eval.at_end=false", "checkpoint.at_end=false",
                           "checkpoint.resume=never"});
  throw_if_errors(validate(config), "the GPU test's config");
  const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(gpu_grid().cuda_device));
  reset_cuda_peak_stats(device);  // the peak from here on is the job's
  ASSERT_EQ(run_training_job(config, "the GPU test's config"), 0);
  const double allocator_peak_bytes = static_cast<double>(cuda_allocator_stats(device).value().peak_allocated_bytes);
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);

  const std::string path = (dir.path() / "gpu_job.h5").string();
  const H5Handle file(H5_CHECK(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), path));
  const std::vector<double> peak = read_doubles(file.get(), "/steps/memory_peak_bytes", path);
  const std::vector<double> allocated = read_doubles(file.get(), "/steps/memory_allocated_bytes", path);
  const int64_t parameters = read_int_attribute(file.get(), "parameter_count", path);
  ASSERT_EQ(peak.size(), 6u) << "one rank, six steps";
  ASSERT_EQ(allocated.size(), peak.size());
  // Weights, fp32 master weights, AdamW's two moments and fp32 main gradients: at least 16 bytes per parameter
  // are allocated at once by the first optimizer step.
  const double state_bytes = 16.0 * static_cast<double>(parameters);
  for (size_t s = 0; s < peak.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s + 1));
    EXPECT_GE(peak[s], state_bytes) << parameters << " parameters";
    EXPECT_GE(peak[s], allocated[s]);
    EXPECT_LE(peak[s], allocator_peak_bytes);
    EXPECT_LE(peak[s], static_cast<double>(total_bytes));
    if (s > 0) EXPECT_GE(peak[s], peak[s - 1]) << "a peak since the start does not go down";
  }
  std::printf("run file peak %.3f GiB (allocator %.3f GiB, device %.1f GiB, predicted %.3f GiB)\n",
              peak.back() / (1 << 30), allocator_peak_bytes / (1 << 30), static_cast<double>(total_bytes) / (1 << 30),
              static_cast<double>(read_int_attribute(file.get(), "predicted_memory_bytes_per_device", path)) / (1 << 30));
}

}  // namespace
}  // namespace t5scale
