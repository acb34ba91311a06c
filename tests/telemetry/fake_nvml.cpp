// A stand-in for libnvidia-ml.so.1 with the functions t5scale calls, and fake_nvml_* functions through which a
// test scripts what it reports: two GPUs with energy counters and power draw set by the test, a switch that makes
// the energy counter NOT_SUPPORTED (pre-Volta GPUs), and failures on demand. Loaded through
// T5SCALE_NVML_LIBRARY; the test opens the same file with dlopen to reach the fake_nvml_* functions.
#include <atomic>
#include <cstring>
#include <strings.h>

namespace {

constexpr int kSuccess = 0;
constexpr int kInvalidArgument = 2;
constexpr int kNotSupported = 3;
constexpr int kUnknown = 999;
constexpr unsigned kDevices = 2;

struct FakeDevice {
  const char* name;
  const char* pci_bus_id;
  std::atomic<unsigned long long> energy_mj{0};
  std::atomic<unsigned> power_mw{0};
};

FakeDevice devices[kDevices] = {{"NVIDIA H100 80GB HBM3", "00000000:3B:00.0"},
                                {"Tesla V100-SXM2-16GB", "00000000:86:00.0"}};
std::atomic<bool> energy_supported{true};
std::atomic<bool> energy_fails{false};
std::atomic<bool> power_fails{false};
std::atomic<int> init_result{kSuccess};
std::atomic<int> init_calls{0};
std::atomic<int> shutdown_calls{0};

}  // namespace

struct nvmlDevice_st;

extern "C" {

// ---- Control ----
void fake_nvml_reset() {
  for (auto& device : devices) {
    device.energy_mj = 0;
    device.power_mw = 0;
  }
  energy_supported = true;
  energy_fails = false;
  power_fails = false;
  init_result = kSuccess;
  init_calls = 0;
  shutdown_calls = 0;
}
void fake_nvml_set_energy_mj(unsigned device, unsigned long long millijoules) { devices[device].energy_mj = millijoules; }
void fake_nvml_set_power_mw(unsigned device, unsigned milliwatts) { devices[device].power_mw = milliwatts; }
void fake_nvml_set_energy_supported(int supported) { energy_supported = supported != 0; }
void fake_nvml_set_energy_fails(int fails) { energy_fails = fails != 0; }
void fake_nvml_set_power_fails(int fails) { power_fails = fails != 0; }
void fake_nvml_set_init_result(int result) { init_result = result; }
int fake_nvml_init_calls() { return init_calls; }
int fake_nvml_shutdown_calls() { return shutdown_calls; }

// ---- NVML ----
int nvmlInit_v2() {
  ++init_calls;
  return init_result;
}
int nvmlShutdown() {
  ++shutdown_calls;
  return kSuccess;
}
const char* nvmlErrorString(int result) {
  switch (result) {
    case kSuccess: return "Success";
    case kNotSupported: return "Not Supported";
    case 9: return "Driver Not Loaded";
    default: return "Unknown Error";
  }
}
int nvmlDeviceGetCount_v2(unsigned* count) {
  *count = kDevices;
  return kSuccess;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_st** device) {
  if (index >= kDevices) return kInvalidArgument;
  *device = reinterpret_cast<nvmlDevice_st*>(&devices[index]);
  return kSuccess;
}
int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, nvmlDevice_st** device) {
  for (auto& candidate : devices) {
    if (strcasecmp(candidate.pci_bus_id, bus_id) == 0) {
      *device = reinterpret_cast<nvmlDevice_st*>(&candidate);
      return kSuccess;
    }
  }
  return kInvalidArgument;
}
int nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_st* device, unsigned long long* energy) {
  if (!energy_supported) return kNotSupported;
  if (energy_fails) return kUnknown;
  *energy = reinterpret_cast<FakeDevice*>(device)->energy_mj;
  return kSuccess;
}
int nvmlDeviceGetPowerUsage(nvmlDevice_st* device, unsigned* power) {
  if (power_fails) return kUnknown;
  *power = reinterpret_cast<FakeDevice*>(device)->power_mw;
  return kSuccess;
}
int nvmlDeviceGetName(nvmlDevice_st* device, char* name, unsigned length) {
  std::strncpy(name, reinterpret_cast<FakeDevice*>(device)->name, length);
  return kSuccess;
}
int nvmlSystemGetDriverVersion(char* version, unsigned length) {
  std::strncpy(version, "550.54.15", length);
  return kSuccess;
}
int nvmlSystemGetCudaDriverVersion_v2(int* version) {
  *version = 12040;
  return kSuccess;
}

}  // extern "C"
