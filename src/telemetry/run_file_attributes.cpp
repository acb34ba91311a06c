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
  if (const auto* real = std::get_if<double>(&value)) {
    H5_CHECK(H5Awrite(attribute.get(), H5T_NATIVE_DOUBLE, real), path);
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

// Every problem of the caller's values at once, each naming the attribute. (Their names and kinds are
// RunDescription's: the compiler checks them.)
void validate_caller_attributes(const RunDescription& d, const std::string& path) {
  std::vector<std::string> errors;
  const int64_t world = d.world_size, nodes = d.nodes;
  if (world < 1) errors.push_back(msg("attribute 'world_size' must be >= 1, got ", world));
  if (nodes < 1) errors.push_back(msg("attribute 'nodes' must be >= 1, got ", nodes));
  if (world >= 1 && nodes >= 1 && world % nodes != 0) {
    errors.push_back(msg("attribute 'world_size' ", world, " is not divisible by 'nodes' ", nodes,
                         " (ranks are placed node by node, world_size / nodes on each)"));
  }
  if (d.tp * d.dp != world) {
    errors.push_back(msg("attributes 'tp' ", d.tp, " x 'dp' ", d.dp, " != 'world_size' ", world));
  }
  const std::string& gpu = d.energy_source_gpu;
  if (gpu != "nvml_energy_counter" && gpu != "nvml_power_integrated" && gpu != "none") {
    errors.push_back(msg("attribute 'energy_source_gpu' is '", gpu,
                         "'; one of nvml_energy_counter, nvml_power_integrated, none is expected"));
  }
  const std::string& cpu = d.energy_source_cpu;
  if (cpu != "rapl" && cpu != "none") {
    errors.push_back(msg("attribute 'energy_source_cpu' is '", cpu, "'; one of rapl, none is expected"));
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
  static const std::vector<std::pair<std::string, AttributeKind>> attributes = [] {
    std::vector<std::pair<std::string, AttributeKind>> kinds;
    for (const auto& [name, value] : description_attributes(RunDescription{})) kinds.emplace_back(name, kind_of(value));
    return kinds;
  }();
  return attributes;
}

}  // namespace t5scale
