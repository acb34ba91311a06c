#include "telemetry/energy_meter.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include "core/check.h"
#include "telemetry/nvml.h"

namespace t5scale {

namespace {

// The number in a one-line sysfs file, std::nullopt when it cannot be read.
std::optional<uint64_t> read_counter(const std::string& file) {
  std::ifstream in(file);
  uint64_t value = 0;
  if (!(in >> value)) return std::nullopt;
  return value;
}

}  // namespace

RaplEnergyMeter::RaplEnergyMeter(const std::string& powercap_root) {
  std::error_code error;
  T5S_CHECK(std::filesystem::is_directory(powercap_root, error), "RAPL: '", powercap_root,
            "' does not exist (no powercap interface on this machine)");
  // Package domains only: "intel-rapl:0", not the sub-domains "intel-rapl:0:0".
  const std::regex package_name("intel-rapl:([0-9]+)");
  std::vector<std::pair<int, std::string>> packages;
  for (const auto& entry : std::filesystem::directory_iterator(powercap_root, error)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, match, package_name)) packages.emplace_back(std::stoi(match[1]), entry.path().string());
  }
  T5S_CHECK(!packages.empty(), "RAPL: no package domain (intel-rapl:<N>) under '", powercap_root, "'");
  std::sort(packages.begin(), packages.end());
  for (const auto& [index, folder] : packages) {
    const auto energy = read_counter(folder + "/energy_uj");
    const auto range = read_counter(folder + "/max_energy_range_uj");
    // One unreadable package would make the sum an undercount: no RAPL figure at all instead.
    T5S_CHECK(energy.has_value(), "RAPL: cannot read '", folder, "/energy_uj' (root-only on recent kernels)");
    T5S_CHECK(range.has_value() && *range > 0, "RAPL: cannot read '", folder, "/max_energy_range_uj'");
    domains_.push_back({folder, *range, *energy});
  }
}

std::optional<double> RaplEnergyMeter::read_j() {
  std::vector<uint64_t> now_uj;
  for (const auto& domain : domains_) {
    const auto value = read_counter(domain.folder + "/energy_uj");
    if (!value) return std::nullopt;  // this reading only; the counters stay cumulative
    now_uj.push_back(*value);
  }
  for (size_t i = 0; i < domains_.size(); ++i) {
    Domain& domain = domains_[i];
    const uint64_t now = now_uj[i];
    // A lower value has wrapped around max_energy_range_uj once since the previous reading.
    total_uj_ += now >= domain.last_uj ? now - domain.last_uj : domain.max_energy_range_uj - domain.last_uj + now;
    domain.last_uj = now;
  }
  return static_cast<double>(total_uj_) / 1e6;
}

std::vector<std::string> RaplEnergyMeter::domains() const {
  std::vector<std::string> folders;
  for (const auto& domain : domains_) folders.push_back(domain.folder);
  return folders;
}

void PowerIntegrator::add_sample(double time_s, double power_w) {
  if (samples_ > 0) energy_j_ += 0.5 * (last_power_w_ + power_w) * (time_s - last_time_s_);
  last_time_s_ = time_s;
  last_power_w_ = power_w;
  ++samples_;
}

namespace {
// A note is for the log line, not for debugging: the reason, without the check's source location.
std::string reason_of(const std::exception& e) {
  const std::string what = e.what();
  return what.substr(0, what.find(" [check '"));
}
}  // namespace

std::unique_ptr<EnergyMeter> make_gpu_energy_meter(const std::string& selection, int device_index,
                                                   std::string* note, double sample_period_s) {
  if (note != nullptr) note->clear();
  T5S_CHECK(selection == "auto" || selection == "nvml" || selection == "none", "telemetry.gpu_energy: '",
            selection, "' is not one of auto, nvml, none");
  if (selection == "none") return std::make_unique<NoEnergyMeter>();
  try {
    return std::make_unique<NvmlEnergyMeter>(NvmlLibrary::load(), device_index, sample_period_s);
  } catch (const Error& e) {
    if (selection == "nvml") throw Error(msg("telemetry.gpu_energy: nvml: ", e.what()));
    if (note != nullptr) *note = msg("GPU energy not measured: ", reason_of(e));
    return std::make_unique<NoEnergyMeter>();
  }
}

std::unique_ptr<EnergyMeter> make_cpu_energy_meter(const std::string& selection, std::string* note,
                                                   const std::string& powercap_root) {
  if (note != nullptr) note->clear();
  T5S_CHECK(selection == "auto" || selection == "rapl" || selection == "none", "telemetry.cpu_energy: '",
            selection, "' is not one of auto, rapl, none");
  if (selection == "none") return std::make_unique<NoEnergyMeter>();
  try {
    return std::make_unique<RaplEnergyMeter>(powercap_root);
  } catch (const Error& e) {
    if (selection == "rapl") throw Error(msg("telemetry.cpu_energy: rapl: ", e.what()));
    if (note != nullptr) *note = msg("CPU energy not measured: ", reason_of(e));
    return std::make_unique<NoEnergyMeter>();
  }
}

}  // namespace t5scale
