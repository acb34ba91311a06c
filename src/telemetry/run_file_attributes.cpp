#include <algorithm>
#include <set>

#include "core/hdf5_attributes.h"
#include "telemetry/run_file_internal.h"

namespace t5scale {

namespace run_file_internal {


// Writes a new value into an attribute that exists, keeping its type: what SWMR allows. A string longer than the
// attribute's fixed length is cut at a UTF-8 character boundary.
void overwrite_attribute(hid_t location, const std::string& name, const AttributeValue& value,
                         const std::string& path) {
  H5Handle attribute(H5_CHECK(H5Aopen(location, name.c_str(), H5P_DEFAULT), path));
  if (const auto* integer = std::get_if<int64_t>(&value)) {
    H5_CHECK(H5Awrite(attribute.get(), H5T_NATIVE_INT64, integer), path);
    return;
  }
  H5Handle type(H5_CHECK(H5Aget_type(attribute.get()), path));
  T5S_CHECK(H5Tget_class(type.get()) == H5T_STRING && std::holds_alternative<std::string>(value), "run file '", path,
            "': attribute '", name, "' is not a text attribute");
  const size_t size = H5Tget_size(type.get());
  std::string text = std::get<std::string>(value);
  if (text.size() > size) {
    size_t cut = size;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80) --cut;
    text.resize(cut);
  }
  text.resize(size, '\0');
  H5_CHECK(H5Awrite(attribute.get(), type.get(), text.data()), path);
}

const char* kind_name(AttributeKind kind) {
  switch (kind) {
    case AttributeKind::kInt64: return "int64";
    case AttributeKind::kFloat64: return "float64";
    case AttributeKind::kString: return "string";
  }
  return "?";
}

AttributeKind kind_of(const AttributeValue& value) {
  if (std::holds_alternative<int64_t>(value)) return AttributeKind::kInt64;
  if (std::holds_alternative<double>(value)) return AttributeKind::kFloat64;
  return AttributeKind::kString;
}

// The root attributes that the run file sets itself.
const std::vector<std::string>& own_attribute_names() {
  static const std::vector<std::string> names = {"format",  "schema_version",    "start_time_utc", "status",
                                                 "attempt", "resumed_from_step", "error",          "error_step"};
  return names;
}

// The kinds of the root attributes the run file sets itself, in own_attribute_names()' order.
const std::vector<AttributeKind>& own_attribute_kinds() {
  using K = AttributeKind;
  static const std::vector<AttributeKind> kinds = {K::kString, K::kInt64, K::kString, K::kString,
                                                   K::kInt64,  K::kInt64, K::kString, K::kInt64};
  return kinds;
}

const AttributeValue* find_attribute(const RunAttributes& attributes, const std::string& name) {
  for (const auto& [key, value] : attributes) {
    if (key == name) return &value;
  }
  return nullptr;
}

// Every problem of the caller's attributes at once, each naming the attribute.
void validate_caller_attributes(const RunAttributes& attributes, const std::string& path) {
  std::vector<std::string> errors;
  std::set<std::string> seen;
  const auto& expected = run_file_caller_attributes();
  for (const auto& [name, value] : attributes) {
    if (!seen.insert(name).second) {
      errors.push_back(msg("attribute '", name, "' is given twice"));
      continue;
    }
    const auto& own = own_attribute_names();
    if (std::find(own.begin(), own.end(), name) != own.end()) {
      errors.push_back(msg("attribute '", name, "' is set by the run file itself"));
      continue;
    }
    auto it = std::find_if(expected.begin(), expected.end(), [&](const auto& entry) { return entry.first == name; });
    if (it == expected.end()) {
      errors.push_back(msg("attribute '", name, "' is not in schema ", kSchemaVersion));
    } else if (kind_of(value) != it->second) {
      errors.push_back(msg("attribute '", name, "' must be ", kind_name(it->second), ", got ",
                           kind_name(kind_of(value))));
    }
  }
  for (const auto& [name, kind] : expected) {
    if (!seen.count(name)) errors.push_back(msg("attribute '", name, "' (", kind_name(kind), ") is missing"));
  }
  if (errors.empty()) {
    const int64_t world = std::get<int64_t>(*find_attribute(attributes, "world_size"));
    const int64_t nodes = std::get<int64_t>(*find_attribute(attributes, "nodes"));
    const int64_t tp = std::get<int64_t>(*find_attribute(attributes, "tp"));
    const int64_t dp = std::get<int64_t>(*find_attribute(attributes, "dp"));
    if (world < 1) errors.push_back(msg("attribute 'world_size' must be >= 1, got ", world));
    if (nodes < 1) errors.push_back(msg("attribute 'nodes' must be >= 1, got ", nodes));
    if (world >= 1 && nodes >= 1 && world % nodes != 0) {
      errors.push_back(msg("attribute 'world_size' ", world, " is not divisible by 'nodes' ", nodes,
                           " (ranks are placed node by node, world_size / nodes on each)"));
    }
    if (tp * dp != world) {
      errors.push_back(msg("attributes 'tp' ", tp, " x 'dp' ", dp, " != 'world_size' ", world));
    }
    const auto& gpu = std::get<std::string>(*find_attribute(attributes, "energy_source_gpu"));
    if (gpu != "nvml_energy_counter" && gpu != "nvml_power_integrated" && gpu != "none") {
      errors.push_back(msg("attribute 'energy_source_gpu' is '", gpu,
                           "'; one of nvml_energy_counter, nvml_power_integrated, none is expected"));
    }
    const auto& cpu = std::get<std::string>(*find_attribute(attributes, "energy_source_cpu"));
    if (cpu != "rapl" && cpu != "none") {
      errors.push_back(msg("attribute 'energy_source_cpu' is '", cpu, "'; one of rapl, none is expected"));
    }
  }
  if (errors.empty()) return;
  std::string text = msg("run file '", path, "': ", errors.size(), " problem(s) with the root attributes:");
  for (const auto& error : errors) text += "\n  " + error;
  throw Error(text);
}

}  // namespace run_file_internal

using namespace run_file_internal;

// ---- Public tables ----

const std::vector<std::pair<std::string, AttributeKind>>& run_file_caller_attributes() {
  using K = AttributeKind;
  static const std::vector<std::pair<std::string, AttributeKind>> attributes = {
      {"run_id", K::kString},
      {"study", K::kString},
      {"git_revision", K::kString},
      {"slurm_job_id", K::kString},         // "" outside Slurm
      {"slurm_array_task_id", K::kString},  // "" outside a job array
      {"hosts", K::kString},
      {"nodes", K::kInt64},
      {"gpus_per_node", K::kInt64},
      {"world_size", K::kInt64},
      {"tp", K::kInt64},
      {"dp", K::kInt64},
      {"model_name", K::kString},
      {"parameter_count", K::kInt64},
      {"global_batch", K::kInt64},
      {"micro_batch", K::kInt64},
      {"grad_accumulation", K::kInt64},
      {"base_lr", K::kFloat64},
      {"effective_lr", K::kFloat64},
      {"lr_scaling_rule", K::kString},
      {"reference_global_batch", K::kInt64},
      {"warmup_steps", K::kInt64},
      {"max_steps", K::kInt64},
      {"steps_per_epoch", K::kInt64},
      {"epochs", K::kFloat64},  // max_steps / steps_per_epoch: fractional
      {"precision", K::kString},
      {"optimizer", K::kString},
      {"device_names", K::kString},
      {"driver_version", K::kString},
      {"cuda_version", K::kString},
      {"nccl_version", K::kString},
      {"torch_version", K::kString},
      {"peak_flops_per_device", K::kFloat64},
      {"price_per_node_hour_usd", K::kFloat64},
      {"carbon_intensity_g_per_kwh", K::kFloat64},
      {"pue", K::kFloat64},
      {"predicted_memory_bytes_per_device", K::kInt64},
      {"predicted_flops_per_step", K::kFloat64},
      {"checkpoint_every_blocks", K::kInt64},  // activation checkpointing as run: 0 none, k every k-th block
      {"attention_kernels", K::kString},       // "explicit", or each call site's SDPA kernel (T5Model::attention_kernels)
      {"energy_source_gpu", K::kString},
      {"energy_source_cpu", K::kString},
      {"config_yaml", K::kString},
      {"config_changes", K::kString},  // on resume, "step N: key: before -> after", one a line; "" when none
  };
  return attributes;
}

const std::vector<std::string>& run_file_eval_metrics() {
  static const std::vector<std::string> metrics = {"loss",        "rouge1", "rouge2",   "rougeL",  "rougeLsum",
                                                   "exact_match", "f1",     "accuracy", "macro_f1"};
  return metrics;
}

}  // namespace t5scale
