// Energy meters: NVML against a scripted fake library (counter, power integration, names, failures), RAPL
// against a fake powercap folder (packages, sub-domains, wraparound, unreadable counters), and the selection.
#include <dlfcn.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "support/base_test_support.h"
#include "telemetry/energy_meter.h"
#include "telemetry/nvml.h"

#ifndef T5SCALE_FAKE_NVML_PATH
#error "T5SCALE_FAKE_NVML_PATH (the fake NVML library built beside the tests) must be defined"
#endif

namespace t5scale {
namespace {

using testing::error_of;
using testing::TempDir;

// ---- NVML ----

// The fake library's scripting functions, and T5SCALE_NVML_LIBRARY pointing at it for the test's duration.
class NvmlMeter : public ::testing::Test {
 protected:
  void SetUp() override {
    handle_ = dlopen(T5SCALE_FAKE_NVML_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle_, nullptr) << dlerror();
    setenv("T5SCALE_NVML_LIBRARY", T5SCALE_FAKE_NVML_PATH, 1);
    call<void()>("fake_nvml_reset")();
  }
  void TearDown() override {
    unsetenv("T5SCALE_NVML_LIBRARY");
    if (handle_ != nullptr) dlclose(handle_);
  }
  template <typename Signature>
  Signature* call(const char* name) {
    auto* function = reinterpret_cast<Signature*>(dlsym(handle_, name));
    EXPECT_NE(function, nullptr) << name;
    return function;
  }
  void set_energy_mj(unsigned device, unsigned long long mj) {
    call<void(unsigned, unsigned long long)>("fake_nvml_set_energy_mj")(device, mj);
  }
  void set_power_mw(unsigned device, unsigned mw) { call<void(unsigned, unsigned)>("fake_nvml_set_power_mw")(device, mw); }
  void set(const char* switch_name, int value) { call<void(int)>(switch_name)(value); }

  void* handle_ = nullptr;
};

TEST_F(NvmlMeter, NamesAndVersions) {
  auto nvml = NvmlLibrary::load();
  EXPECT_EQ(NvmlLibrary::library_path(), T5SCALE_FAKE_NVML_PATH);
  EXPECT_EQ(nvml->device_count(), 2);
  EXPECT_EQ(nvml->device_name(0), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(nvml->device_name(1), "Tesla V100-SXM2-16GB");
  EXPECT_EQ(nvml->driver_version(), "550.54.15");
  EXPECT_EQ(nvml->cuda_driver_version(), "12.4");
  EXPECT_EQ(nvml->device_index_of_pci_bus_id("00000000:86:00.0"), 1);
  EXPECT_EQ(nvml->device_index_of_pci_bus_id("00000000:3b:00.0"), 0);
  EXPECT_NE(error_of([&] { nvml->device_index_of_pci_bus_id("00000000:01:00.0"); }).find("no device with PCI bus id"),
            std::string::npos);
  EXPECT_NE(error_of([&] { nvml->device_name(5); }).find("no device 5 (2 devices)"), std::string::npos);
}

TEST_F(NvmlMeter, InitAndShutdownArePaired) {
  {
    auto nvml = NvmlLibrary::load();
    NvmlEnergyMeter meter(nvml, 0);
    EXPECT_EQ(call<int()>("fake_nvml_init_calls")(), 1);
    EXPECT_EQ(call<int()>("fake_nvml_shutdown_calls")(), 0);
  }
  EXPECT_EQ(call<int()>("fake_nvml_shutdown_calls")(), 1);
}

// refresh() reads at once; a sample period of an hour keeps the background thread out of the way.
TEST_F(NvmlMeter, EnergyCounterGivesJoulesSinceTheMeterStarted) {
  set_energy_mj(1, 1000000);  // the counter counts since the driver loaded
  set_power_mw(1, 287500);
  NvmlEnergyMeter meter(NvmlLibrary::load(), 1, 3600.0);
  EXPECT_EQ(meter.source(), "nvml_energy_counter");
  EXPECT_EQ(meter.device_name(), "Tesla V100-SXM2-16GB");
  EXPECT_EQ(meter.read_j(), 0.0);
  EXPECT_EQ(meter.power_w(), 287.5);
  set_energy_mj(1, 1250500);
  meter.refresh();
  EXPECT_EQ(meter.read_j(), 250.5);
  // A failed reading is unknown, and only that one: the counter is cumulative.
  set("fake_nvml_set_energy_fails", 1);
  meter.refresh();
  EXPECT_EQ(meter.read_j(), std::nullopt);
  set("fake_nvml_set_energy_fails", 0);
  set_energy_mj(1, 1300000);
  meter.refresh();
  EXPECT_EQ(meter.read_j(), 300.0);
  // A counter that goes backwards (the driver reloaded) no longer counts from the meter's start: unknown for good.
  set_energy_mj(1, 5000);
  meter.refresh();
  EXPECT_EQ(meter.read_j(), std::nullopt);
  set_energy_mj(1, 1400000);
  meter.refresh();
  EXPECT_EQ(meter.read_j(), std::nullopt);
  set("fake_nvml_set_power_fails", 1);
  meter.refresh();
  EXPECT_EQ(meter.power_w(), std::nullopt);
}

// A step's reading does not call NVML (a call took about 2 ms on a virtualised H200): read_j() and power_w() give
// the newest reading, whatever NVML would say now, until the background thread or refresh() reads again.
TEST_F(NvmlMeter, ReadingsComeFromTheNewestSampleNotFromACall) {
  set_energy_mj(0, 2000000);
  set_power_mw(0, 300000);
  NvmlEnergyMeter meter(NvmlLibrary::load(), 0, 3600.0);
  set_energy_mj(0, 2100000);
  set("fake_nvml_set_energy_fails", 1);
  set("fake_nvml_set_power_fails", 1);
  EXPECT_EQ(meter.read_j(), 0.0) << "read_j() called NVML (which now fails)";
  EXPECT_EQ(meter.power_w(), 300.0) << "power_w() called NVML (which now fails)";
  set("fake_nvml_set_energy_fails", 0);
  set("fake_nvml_set_power_fails", 0);
  set_power_mw(0, 310000);
  meter.refresh();
  EXPECT_EQ(meter.read_j(), 100.0);
  EXPECT_EQ(meter.power_w(), 310.0);
}

// With a short period the background thread takes the readings by itself.
TEST_F(NvmlMeter, TheBackgroundThreadFollowsTheCounter) {
  set_energy_mj(0, 1000000);
  NvmlEnergyMeter meter(NvmlLibrary::load(), 0, 0.01);
  set_energy_mj(0, 1042000);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (meter.read_j() != std::optional<double>(42.0) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(meter.read_j(), 42.0) << "no background reading within 10 s at a 10 ms period";
}

TEST_F(NvmlMeter, WithoutTheCounterPowerIsIntegrated) {
  set("fake_nvml_set_energy_supported", 0);
  set_power_mw(0, 250000);
  const auto before = std::chrono::steady_clock::now();
  NvmlEnergyMeter meter(NvmlLibrary::load(), 0, 0.01);
  EXPECT_EQ(meter.source(), "nvml_power_integrated");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::optional<double> energy = meter.read_j();
  const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
  // Constant 250 W: 250 W times the span between the first and the newest sample, which lies inside the
  // meter's life; at least two samples were taken in 300 ms at a 10 ms period.
  ASSERT_TRUE(energy.has_value());
  EXPECT_GE(meter.power_samples(), 2);
  EXPECT_GT(*energy, 0.0);
  EXPECT_LE(*energy, 250.0 * elapsed_s);
  // No sample for over 1 s (max(1 s, 10 periods)): the integral is unknown from then on.
  set("fake_nvml_set_power_fails", 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  set("fake_nvml_set_power_fails", 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(meter.read_j(), std::nullopt);
}

TEST_F(NvmlMeter, NeitherEnergyNorPowerIsAnError) {
  set("fake_nvml_set_energy_supported", 0);
  set("fake_nvml_set_power_fails", 1);
  const std::string message = error_of([&] { NvmlEnergyMeter meter(NvmlLibrary::load(), 0); });
  EXPECT_NE(message.find("neither total energy (Not Supported (NVML error 3)) nor power usage"), std::string::npos)
      << message;
  // auto: no meter, and why; nvml named explicitly: the error.
  std::string note;
  EXPECT_EQ(make_gpu_energy_meter("auto", 0, &note)->source(), "none");
  EXPECT_NE(note.find("neither total energy"), std::string::npos) << note;
  EXPECT_NE(error_of([&] { make_gpu_energy_meter("nvml", 0, &note); }).find("telemetry.gpu_energy: nvml:"),
            std::string::npos);
}

TEST_F(NvmlMeter, InitFailureAndMissingLibrary) {
  set("fake_nvml_set_init_result", 9);
  EXPECT_NE(error_of([&] { NvmlLibrary::load(); }).find("nvmlInit_v2 in '" T5SCALE_FAKE_NVML_PATH "' failed: Driver Not Loaded"),
            std::string::npos);
  setenv("T5SCALE_NVML_LIBRARY", "/no/such/libnvidia-ml.so.1", 1);
  std::string note;
  auto meter = make_gpu_energy_meter("auto", 0, &note);
  EXPECT_EQ(meter->source(), "none");
  EXPECT_EQ(meter->read_j(), std::nullopt);
  EXPECT_NE(note.find("cannot load '/no/such/libnvidia-ml.so.1'"), std::string::npos) << note;
  EXPECT_NE(error_of([&] { make_gpu_energy_meter("nvml", 0, &note); }).find("/no/such/libnvidia-ml.so.1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make_gpu_energy_meter("rapl", 0, &note); }).find("not one of auto, nvml, none"),
            std::string::npos);
  EXPECT_EQ(make_gpu_energy_meter("none", 0, &note)->source(), "none");
  EXPECT_EQ(note, "");
}

TEST(PowerIntegrator, TrapezoidsOfTheSamples) {
  PowerIntegrator integrator;
  integrator.add_sample(10.0, 100.0);
  EXPECT_EQ(integrator.energy_j(), 0.0);
  integrator.add_sample(10.5, 200.0);  // 0.5 s x 150 W
  integrator.add_sample(12.5, 200.0);  // 2 s x 200 W
  integrator.add_sample(13.0, 0.0);    // 0.5 s x 100 W
  EXPECT_EQ(integrator.energy_j(), 75.0 + 400.0 + 50.0);
  EXPECT_EQ(integrator.samples(), 4);
}

// ---- RAPL ----

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// A powercap folder like a two-socket machine's: two packages with sub-domains beside them, and an MMIO domain.
void make_powercap(const std::filesystem::path& root, uint64_t package0_uj, uint64_t package1_uj) {
  write_file(root / "intel-rapl:0" / "name", "package-0\n");
  write_file(root / "intel-rapl:0" / "energy_uj", std::to_string(package0_uj) + "\n");
  write_file(root / "intel-rapl:0" / "max_energy_range_uj", "1000000000\n");
  write_file(root / "intel-rapl:0:0" / "name", "core\n");
  write_file(root / "intel-rapl:0:0" / "energy_uj", "777777\n");
  write_file(root / "intel-rapl:0:0" / "max_energy_range_uj", "1000000000\n");
  write_file(root / "intel-rapl:1" / "name", "package-1\n");
  write_file(root / "intel-rapl:1" / "energy_uj", std::to_string(package1_uj) + "\n");
  write_file(root / "intel-rapl:1" / "max_energy_range_uj", "262143328850\n");
  write_file(root / "intel-rapl-mmio:0" / "energy_uj", "5\n");
}

TEST(RaplMeter, SumsThePackagesAcrossAWraparound) {
  TempDir dir;
  const auto root = dir.path();
  make_powercap(root, 990000000, 5000000);
  RaplEnergyMeter meter(root.string());
  EXPECT_EQ(meter.source(), "rapl");
  EXPECT_EQ(meter.domains(), (std::vector<std::string>{(root / "intel-rapl:0").string(), (root / "intel-rapl:1").string()}));
  EXPECT_EQ(meter.read_j(), 0.0);
  make_powercap(root, 999000000, 7500000);  // +9 J, +2.5 J
  EXPECT_EQ(meter.read_j(), 11.5);
  // Package 0 wraps at max_energy_range_uj = 1e9: from 999e6 to 500e3 is 1e6 + 500e3 uJ.
  make_powercap(root, 500000, 7500000);
  EXPECT_EQ(meter.read_j(), 13.0);
  // A counter that cannot be read makes that reading unknown; the next one counts from the last good values.
  std::filesystem::remove(root / "intel-rapl:1" / "energy_uj");
  EXPECT_EQ(meter.read_j(), std::nullopt);
  make_powercap(root, 1500000, 8500000);
  EXPECT_EQ(meter.read_j(), 15.0);
}

TEST(RaplMeter, UnreadableCountersAreNotAvailableNeverAGuess) {
  TempDir dir;
  const auto root = dir.path();
  std::string note;
  // No powercap folder at all (many VMs).
  EXPECT_NE(error_of([&] { RaplEnergyMeter meter((root / "absent").string()); }).find("does not exist"),
            std::string::npos);
  auto meter = make_cpu_energy_meter("auto", &note, (root / "absent").string());
  EXPECT_EQ(meter->source(), "none");
  EXPECT_EQ(meter->read_j(), std::nullopt);
  EXPECT_NE(note.find("CPU energy not measured"), std::string::npos) << note;
  // One package readable, the other not (root-only counters): no sum of only part of the packages.
  make_powercap(root, 1, 2);
  std::filesystem::remove(root / "intel-rapl:1" / "energy_uj");
  std::filesystem::create_directory(root / "intel-rapl:1" / "energy_uj");  // a directory reads as nothing
  const std::string message = error_of([&] { RaplEnergyMeter unreadable(root.string()); });
  EXPECT_NE(message.find("intel-rapl:1/energy_uj'"), std::string::npos) << message;
  EXPECT_EQ(make_cpu_energy_meter("auto", &note, root.string())->source(), "none");
  EXPECT_NE(error_of([&] { make_cpu_energy_meter("rapl", &note, root.string()); }).find("telemetry.cpu_energy: rapl:"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make_cpu_energy_meter("nvml", &note, root.string()); }).find("not one of auto, rapl, none"),
            std::string::npos);
  // Only sub-domains, no package.
  TempDir other;
  write_file(other.path() / "intel-rapl:0:0" / "energy_uj", "1\n");
  EXPECT_NE(error_of([&] { RaplEnergyMeter meter(other.path().string()); }).find("no package domain"),
            std::string::npos);
}

}  // namespace
}  // namespace t5scale
