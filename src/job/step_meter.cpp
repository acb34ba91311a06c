#include "job/step_meter.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "dist/cuda_backend.h"
#include "telemetry/nvml.h"
#include "telemetry/probes.h"
#include "train/device_probe.h"

namespace t5scale {
namespace {

// NVML numbers the node's GPUs itself, ignoring CUDA_VISIBLE_DEVICES: find this rank's GPU by its PCI bus id.
int nvml_device_index(torch::Device device) {
  if (!device.is_cuda()) return 0;
  const std::string bus_id = required_cuda_backend("a GPU's energy meter").device_facts(device.index()).nvml_pci_bus_id;
  try {
    return NvmlLibrary::load()->device_index_of_pci_bus_id(bus_id);
  } catch (const std::exception&) {
    return static_cast<int>(device.index());  // no NVML: the meter factory reports why
  }
}

double value_or_unknown(const std::optional<double>& value) { return value ? *value : kUnknownValue; }

}  // namespace

StepMeter::StepMeter(const TelemetrySettings& settings, torch::Device device, int world_rank,
                     const std::vector<std::string>& world_hosts, std::vector<std::string>* notes)
    : device_(device) {
  std::string gpu_note, cpu_note;
  gpu_meter_ = device.is_cuda()
                   ? make_gpu_energy_meter(enum_name(settings.gpu_energy), nvml_device_index(device), &gpu_note)
                   : std::make_unique<NoEnergyMeter>();
  cpu_meter_ = make_cpu_energy_meter(enum_name(settings.cpu_energy), &cpu_note, settings.powercap_root);
  // The first rank of each node reads the package energy; the others would count it again.
  const auto first_of_host = std::find(world_hosts.begin(), world_hosts.end(),
                                       world_hosts.at(static_cast<size_t>(world_rank)));
  if (first_of_host - world_hosts.begin() != world_rank) cpu_meter_ = std::make_unique<NoEnergyMeter>();
  for (const std::string& note : {gpu_note, cpu_note}) {
    if (notes != nullptr && !note.empty()) notes->push_back(note);
  }
}

void StepMeter::measure(StepRecord& row, bool fresh) {
  if (fresh) {
    gpu_meter_->refresh();
    cpu_meter_->refresh();
  }
  const auto stats = cuda_allocator_stats(device_);
  row.memory_allocated_bytes = {stats ? static_cast<double>(stats->allocated_bytes) : kUnknownValue};
  row.memory_reserved_bytes = {stats ? static_cast<double>(stats->reserved_bytes) : kUnknownValue};
  row.memory_peak_bytes = {stats ? static_cast<double>(stats->peak_allocated_bytes) : kUnknownValue};
  row.host_memory_bytes = {static_cast<double>(peak_resident_set_bytes())};
  row.gpu_power_w = {value_or_unknown(gpu_meter_->power_w())};
  row.gpu_energy_j = {value_or_unknown(gpu_meter_->read_j())};
  row.cpu_energy_j = {value_or_unknown(cpu_meter_->read_j())};
}

}  // namespace t5scale
