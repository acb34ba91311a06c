// Energy meters: joules used since the meter was made, by the GPU (NVML, see nvml.h) or the CPU packages (RAPL),
// or "unavailable" — never a guess. The trainer makes one GPU meter per rank and one CPU meter per rank (ranks on
// one node read the same package counters; the run file's summary counts each node once).
//
//   std::string note;
//   auto cpu = make_cpu_energy_meter("auto", &note);   // RAPL if readable, otherwise a meter saying "none"
//   ... std::optional<double> joules = cpu->read_j();
//
// Selections are the config's names: telemetry.gpu_energy auto | nvml | none, telemetry.cpu_energy
// auto | rapl | none. "auto" falls back to none with a note; naming a source that does not work is an error.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace t5scale {

class EnergyMeter {
 public:
  virtual ~EnergyMeter() = default;
  // Joules since the meter was made; std::nullopt when not known (no source, or this reading failed). Call
  // from one thread. A meter whose source is slow to read (NVML) answers from its newest background sample.
  virtual std::optional<double> read_j() = 0;
  // Current draw in watts where the source measures it (NVML), std::nullopt otherwise.
  virtual std::optional<double> power_w() { return std::nullopt; }
  // Takes a reading now, on the caller's thread, where readings are otherwise sampled in the background (NVML);
  // read_j() and power_w() then give it. Nothing for meters that read their source at each call.
  virtual void refresh() {}
  // The run file's energy_source_* name: "nvml_energy_counter", "nvml_power_integrated", "rapl" or "none".
  virtual std::string source() const = 0;
};

class NoEnergyMeter : public EnergyMeter {
 public:
  std::optional<double> read_j() override { return std::nullopt; }
  std::string source() const override { return "none"; }
};

// CPU package energy from Linux powercap: the sum of the package domains <root>/intel-rapl:<N>/energy_uj (the
// sub-domains intel-rapl:<N>:<M> — core, uncore, dram — are parts of a package and are not added). Each
// counter wraps at max_energy_range_uj; a reading that is lower than the previous one has wrapped once, and
// adds max_energy_range_uj - previous + now (exact to one counter unit, about 61 µJ). More than one wrap between
// two readings cannot be seen: read at least every few minutes (a wrap takes about 262 kJ, over 20 minutes at
// 200 W). Not thread-safe: read from one thread.
class RaplEnergyMeter : public EnergyMeter {
 public:
  // Throws t5scale::Error when there is no readable package domain (absent on many VMs; root-only on recent
  // kernels), naming the folder and the reason.
  explicit RaplEnergyMeter(const std::string& powercap_root = "/sys/class/powercap");
  std::optional<double> read_j() override;
  std::string source() const override { return "rapl"; }
  // The package domain folders, e.g. ".../intel-rapl:0".
  std::vector<std::string> domains() const;

 private:
  struct Domain {
    std::string folder;
    uint64_t max_energy_range_uj = 0;
    uint64_t last_uj = 0;
  };
  std::vector<Domain> domains_;
  uint64_t total_uj_ = 0;  // since construction, summed over domains
};

// Trapezoid integration of power samples into energy, for GPUs without a total-energy counter.
class PowerIntegrator {
 public:
  void add_sample(double time_s, double power_w);
  double energy_j() const { return energy_j_; }
  int64_t samples() const { return samples_; }
  double last_time_s() const { return last_time_s_; }

 private:
  double energy_j_ = 0;
  double last_time_s_ = 0;
  double last_power_w_ = 0;
  int64_t samples_ = 0;
};

// telemetry.gpu_energy: "auto" | "nvml" | "none". NVML comes from $T5SCALE_NVML_LIBRARY or libnvidia-ml.so.1;
// device_index is NVML's index of this rank's GPU (see nvml.h). With "auto", a failure gives NoEnergyMeter and
// the reason in *note.
std::unique_ptr<EnergyMeter> make_gpu_energy_meter(const std::string& selection, int device_index,
                                                   std::string* note, double sample_period_s = 0.1);
// telemetry.cpu_energy: "auto" | "rapl" | "none".
std::unique_ptr<EnergyMeter> make_cpu_energy_meter(const std::string& selection, std::string* note,
                                                   const std::string& powercap_root = "/sys/class/powercap");

}  // namespace t5scale
