// NVIDIA's management library, loaded at run time with dlopen: the build needs no nvml.h and the program runs
// on machines without a GPU driver. Only the few functions used here are declared.
//
//   std::shared_ptr<NvmlLibrary> nvml = NvmlLibrary::load();       // throws when there is no usable NVML
//   NvmlEnergyMeter meter(nvml, nvml->device_index_of_pci_bus_id(bus_id));
//   meter.read_j(); meter.power_w(); nvml->device_name(0); nvml->driver_version();
//
// Device indices are NVML's, which ignore CUDA_VISIBLE_DEVICES: a rank finds its GPU by the PCI bus id that
// CUDA reports for its device (cudaDeviceGetPCIBusId), or by index where the two numberings agree.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "telemetry/energy_meter.h"

namespace t5scale {

class NvmlLibrary {
 public:
  // The library that load() opens: $T5SCALE_NVML_LIBRARY when set, else "libnvidia-ml.so.1".
  static std::string library_path();
  // dlopen + nvmlInit_v2. Throws t5scale::Error naming the library and the reason (not found, a missing
  // function, NVML's error string).
  static std::shared_ptr<NvmlLibrary> load();
  ~NvmlLibrary();  // nvmlShutdown, dlclose
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  int device_count() const;
  // NVML's index of the device with this PCI bus id ("00000000:3B:00.0", as CUDA prints it; case and the
  // number of leading zeros of the domain do not matter). Throws when no device has it.
  int device_index_of_pci_bus_id(const std::string& pci_bus_id) const;
  std::string device_name(int device_index) const;
  std::string driver_version() const;       // "550.54.15"
  std::string cuda_driver_version() const;  // the newest CUDA the driver supports, "12.4"

  // Raw calls for NvmlEnergyMeter: NVML's return code (0 = success) and the value.
  struct Reading {
    int status = -1;
    unsigned long long value = 0;
  };
  Reading total_energy_mj(int device_index) const;
  Reading power_mw(int device_index) const;
  std::string error_string(int status) const;

 private:
  struct Functions;
  NvmlLibrary() = default;
  void* device_handle(int device_index) const;

  std::string path_;
  void* library_ = nullptr;
  std::unique_ptr<Functions> functions_;
};

// One GPU's energy. A background thread reads NVML every sample_period_s, and read_j() and power_w() answer from
// its newest reading: an NVML call takes about 2 ms on some machines (seen on a virtualised H200: 3.9 ms per step
// for the energy counter and the power), which a training step must not wait for. refresh() reads at once (the
// run record does at each flush of its rows, so the rows it writes end on fresh figures). Where the GPU has the
// total-energy counter (Volta and newer) that is what is read (millijoules since the driver loaded; it updates
// every 20-100 ms itself, so read it over windows of many steps). Otherwise the power draw is sampled and
// integrated (trapezoids); when no sample succeeds for max(1 s, 10 periods) the integral is no longer known and
// read_j() says so from then on.
class NvmlEnergyMeter : public EnergyMeter {
 public:
  // Throws t5scale::Error when the device reports neither energy nor power.
  NvmlEnergyMeter(std::shared_ptr<NvmlLibrary> nvml, int device_index, double sample_period_s = 0.1);
  ~NvmlEnergyMeter() override;

  std::optional<double> read_j() override;
  std::optional<double> power_w() override;
  void refresh() override;
  std::string source() const override;  // nvml_energy_counter | nvml_power_integrated
  std::string device_name() const { return nvml_->device_name(device_index_); }
  int device_index() const { return device_index_; }
  NvmlLibrary& library() const { return *nvml_; }
  // Power samples integrated so far (0 with the energy counter).
  int64_t power_samples() const;

 private:
  void sample_loop();
  void take_reading();  // reads NVML without the lock, then stores the reading under it

  std::shared_ptr<NvmlLibrary> nvml_;
  int device_index_;
  bool use_counter_ = false;
  unsigned long long start_mj_ = 0;
  unsigned long long last_mj_ = 0;
  bool counter_lost_ = false;  // the counter went backwards (driver reload): no longer cumulative
  std::optional<double> counter_j_;  // the newest counter reading since the start (unknown when it failed)
  std::optional<double> power_now_w_;

  double sample_period_s_;
  std::thread sampler_;
  std::mutex reading_mutex_;  // one reading at a time (sampler or refresh), stored in the order it was taken
  mutable std::mutex mutex_;
  std::condition_variable stop_signal_;
  bool stopping_ = false;
  PowerIntegrator integrator_;
  bool integral_lost_ = false;
};

}  // namespace t5scale
