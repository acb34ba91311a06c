#include "telemetry/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/check.h"

namespace t5scale {

namespace {

// NVML's types as its header declares them: an int return code and an opaque device pointer.
using NvmlReturn = int;
struct NvmlDeviceOpaque;
using NvmlDevice = NvmlDeviceOpaque*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr unsigned kNameBufferSize = 96;     // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned kVersionBufferSize = 80;  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE

double steady_now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

struct NvmlLibrary::Functions {
  NvmlReturn (*init_v2)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*device_get_count_v2)(unsigned*) = nullptr;
  NvmlReturn (*device_get_handle_by_index_v2)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*device_get_total_energy_consumption)(NvmlDevice, unsigned long long*) = nullptr;
  NvmlReturn (*device_get_power_usage)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*device_get_name)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*system_get_driver_version)(char*, unsigned) = nullptr;
  // Optional: older drivers lack the _v2 names, and the error strings are only for messages.
  NvmlReturn (*system_get_cuda_driver_version)(int*) = nullptr;
  NvmlReturn (*device_get_handle_by_pci_bus_id_v2)(const char*, NvmlDevice*) = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  bool initialized = false;
};

std::string NvmlLibrary::library_path() {
  const char* overridden = std::getenv("T5SCALE_NVML_LIBRARY");
  return overridden != nullptr && *overridden != '\0' ? overridden : "libnvidia-ml.so.1";
}

std::shared_ptr<NvmlLibrary> NvmlLibrary::load() {
  std::shared_ptr<NvmlLibrary> nvml(new NvmlLibrary());
  nvml->path_ = library_path();
  nvml->functions_ = std::make_unique<Functions>();
  nvml->library_ = dlopen(nvml->path_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (nvml->library_ == nullptr) {
    const char* reason = dlerror();
    throw Error(msg("NVML: cannot load '", nvml->path_, "': ", reason != nullptr ? reason : "unknown reason",
                    " (no NVIDIA driver on this machine? T5SCALE_NVML_LIBRARY names another library)"));
  }
  auto resolve = [&](auto& function, const char* name, bool required) {
    function = reinterpret_cast<std::decay_t<decltype(function)>>(dlsym(nvml->library_, name));
    T5S_CHECK(function != nullptr || !required, "NVML: '", nvml->path_, "' has no function ", name);
  };
  Functions& f = *nvml->functions_;
  resolve(f.init_v2, "nvmlInit_v2", true);
  resolve(f.shutdown, "nvmlShutdown", true);
  resolve(f.device_get_count_v2, "nvmlDeviceGetCount_v2", true);
  resolve(f.device_get_handle_by_index_v2, "nvmlDeviceGetHandleByIndex_v2", true);
  resolve(f.device_get_total_energy_consumption, "nvmlDeviceGetTotalEnergyConsumption", true);
  resolve(f.device_get_power_usage, "nvmlDeviceGetPowerUsage", true);
  resolve(f.device_get_name, "nvmlDeviceGetName", true);
  resolve(f.system_get_driver_version, "nvmlSystemGetDriverVersion", true);
  resolve(f.system_get_cuda_driver_version, "nvmlSystemGetCudaDriverVersion_v2", false);
  if (f.system_get_cuda_driver_version == nullptr) {
    resolve(f.system_get_cuda_driver_version, "nvmlSystemGetCudaDriverVersion", false);
  }
  resolve(f.device_get_handle_by_pci_bus_id_v2, "nvmlDeviceGetHandleByPciBusId_v2", false);
  resolve(f.error_string, "nvmlErrorString", false);
  const NvmlReturn status = f.init_v2();
  T5S_CHECK(status == kNvmlSuccess, "NVML: nvmlInit_v2 in '", nvml->path_, "' failed: ", nvml->error_string(status));
  f.initialized = true;
  return nvml;
}

NvmlLibrary::~NvmlLibrary() {
  if (functions_ && functions_->initialized) functions_->shutdown();
  if (library_ != nullptr) dlclose(library_);
}

std::string NvmlLibrary::error_string(int status) const {
  if (functions_ && functions_->error_string != nullptr) {
    const char* text = functions_->error_string(status);
    if (text != nullptr) return msg(text, " (NVML error ", status, ")");
  }
  return msg("NVML error ", status);
}

int NvmlLibrary::device_count() const {
  unsigned count = 0;
  const NvmlReturn status = functions_->device_get_count_v2(&count);
  T5S_CHECK(status == kNvmlSuccess, "NVML: nvmlDeviceGetCount_v2 failed: ", error_string(status));
  return static_cast<int>(count);
}

void* NvmlLibrary::device_handle(int device_index) const {
  T5S_CHECK(device_index >= 0, "NVML: device index ", device_index, " is negative");
  NvmlDevice device = nullptr;
  const NvmlReturn status = functions_->device_get_handle_by_index_v2(static_cast<unsigned>(device_index), &device);
  T5S_CHECK(status == kNvmlSuccess, "NVML: no device ", device_index, " (", device_count(), " devices): ",
            error_string(status));
  return device;
}

int NvmlLibrary::device_index_of_pci_bus_id(const std::string& pci_bus_id) const {
  T5S_CHECK(functions_->device_get_handle_by_pci_bus_id_v2 != nullptr, "NVML: '", path_,
            "' has no nvmlDeviceGetHandleByPciBusId_v2; give the device index instead");
  NvmlDevice wanted = nullptr;
  const NvmlReturn status = functions_->device_get_handle_by_pci_bus_id_v2(pci_bus_id.c_str(), &wanted);
  T5S_CHECK(status == kNvmlSuccess, "NVML: no device with PCI bus id '", pci_bus_id, "': ", error_string(status));
  const int count = device_count();
  for (int i = 0; i < count; ++i) {
    if (device_handle(i) == wanted) return i;
  }
  throw Error(msg("NVML: the device with PCI bus id '", pci_bus_id, "' is not among the ", count, " indexed ones"));
}

std::string NvmlLibrary::device_name(int device_index) const {
  char name[kNameBufferSize] = {};
  const NvmlReturn status =
      functions_->device_get_name(static_cast<NvmlDevice>(device_handle(device_index)), name, kNameBufferSize);
  T5S_CHECK(status == kNvmlSuccess, "NVML: nvmlDeviceGetName(", device_index, ") failed: ", error_string(status));
  return std::string(name, strnlen(name, kNameBufferSize));
}

std::string NvmlLibrary::driver_version() const {
  char version[kVersionBufferSize] = {};
  const NvmlReturn status = functions_->system_get_driver_version(version, kVersionBufferSize);
  T5S_CHECK(status == kNvmlSuccess, "NVML: nvmlSystemGetDriverVersion failed: ", error_string(status));
  return std::string(version, strnlen(version, kVersionBufferSize));
}

std::string NvmlLibrary::cuda_driver_version() const {
  T5S_CHECK(functions_->system_get_cuda_driver_version != nullptr, "NVML: '", path_,
            "' has no nvmlSystemGetCudaDriverVersion");
  int version = 0;
  const NvmlReturn status = functions_->system_get_cuda_driver_version(&version);
  T5S_CHECK(status == kNvmlSuccess, "NVML: nvmlSystemGetCudaDriverVersion failed: ", error_string(status));
  // CUDA's encoding: 1000 * major + 10 * minor (12040 is 12.4).
  return msg(version / 1000, ".", (version % 1000) / 10);
}

NvmlLibrary::Reading NvmlLibrary::total_energy_mj(int device_index) const {
  Reading reading;
  reading.status = functions_->device_get_total_energy_consumption(static_cast<NvmlDevice>(device_handle(device_index)),
                                                                   &reading.value);
  return reading;
}

NvmlLibrary::Reading NvmlLibrary::power_mw(int device_index) const {
  Reading reading;
  unsigned milliwatts = 0;
  reading.status = functions_->device_get_power_usage(static_cast<NvmlDevice>(device_handle(device_index)), &milliwatts);
  reading.value = milliwatts;
  return reading;
}

// ---- NvmlEnergyMeter ----

NvmlEnergyMeter::NvmlEnergyMeter(std::shared_ptr<NvmlLibrary> nvml, int device_index, double sample_period_s)
    : nvml_(std::move(nvml)), device_index_(device_index), sample_period_s_(sample_period_s) {
  T5S_CHECK(sample_period_s_ > 0, "NVML energy meter: sample period must be > 0 s, got ", sample_period_s_);
  const int count = nvml_->device_count();
  T5S_CHECK(device_index >= 0 && device_index < count, "NVML: device index ", device_index, " is not among the ",
            count, " devices");
  const NvmlLibrary::Reading energy = nvml_->total_energy_mj(device_index);
  const NvmlLibrary::Reading power = nvml_->power_mw(device_index);
  if (energy.status == 0) {
    use_counter_ = true;
    start_mj_ = last_mj_ = energy.value;
    counter_j_ = 0.0;
  } else {
    T5S_CHECK(power.status == 0, "NVML device ", device_index, " (", nvml_->device_name(device_index),
              ") reports neither total energy (", nvml_->error_string(energy.status), ") nor power usage (",
              nvml_->error_string(power.status), ")");
    integrator_.add_sample(steady_now_s(), static_cast<double>(power.value) / 1000.0);
  }
  if (power.status == 0) power_now_w_ = static_cast<double>(power.value) / 1000.0;
  sampler_ = std::thread(&NvmlEnergyMeter::sample_loop, this);
}

NvmlEnergyMeter::~NvmlEnergyMeter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  stop_signal_.notify_all();
  if (sampler_.joinable()) sampler_.join();
}

void NvmlEnergyMeter::sample_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    stop_signal_.wait_for(lock, std::chrono::duration<double>(sample_period_s_));
    if (stopping_) break;
    lock.unlock();
    take_reading();
    lock.lock();
  }
}

void NvmlEnergyMeter::take_reading() {
  // A gap this long without a successful power sample is no longer bridged by a trapezoid: the integral is lost.
  const double max_gap_s = std::max(1.0, 10 * sample_period_s_);
  const std::lock_guard<std::mutex> one_at_a_time(reading_mutex_);
  const NvmlLibrary::Reading energy = use_counter_ ? nvml_->total_energy_mj(device_index_) : NvmlLibrary::Reading{};
  const NvmlLibrary::Reading power = nvml_->power_mw(device_index_);
  const double now_s = steady_now_s();
  std::lock_guard<std::mutex> lock(mutex_);
  power_now_w_ = power.status == 0 ? std::optional<double>(static_cast<double>(power.value) / 1000.0) : std::nullopt;
  if (use_counter_) {
    // A failed reading is unknown, and only that one: the counter itself is cumulative. A counter that went
    // backwards (the driver reloaded) no longer counts from the meter's start: unknown from then on.
    if (energy.status == 0 && energy.value < last_mj_) counter_lost_ = true;
    if (counter_lost_ || energy.status != 0) {
      counter_j_ = std::nullopt;
      return;
    }
    last_mj_ = energy.value;
    counter_j_ = static_cast<double>(energy.value - start_mj_) / 1000.0;
    return;
  }
  if (now_s - integrator_.last_time_s() > max_gap_s) integral_lost_ = true;
  if (power.status == 0) integrator_.add_sample(now_s, static_cast<double>(power.value) / 1000.0);
}

void NvmlEnergyMeter::refresh() { take_reading(); }

std::optional<double> NvmlEnergyMeter::read_j() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (use_counter_) return counter_j_;
  if (integral_lost_) return std::nullopt;
  return integrator_.energy_j();
}

std::optional<double> NvmlEnergyMeter::power_w() {
  std::lock_guard<std::mutex> lock(mutex_);
  return power_now_w_;
}

std::string NvmlEnergyMeter::source() const {
  return use_counter_ ? "nvml_energy_counter" : "nvml_power_integrated";
}

int64_t NvmlEnergyMeter::power_samples() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return use_counter_ ? 0 : integrator_.samples();
}

}  // namespace t5scale
