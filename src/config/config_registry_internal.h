// The run config's key registry as its source files share it (include it from config/config_registry.cpp and
// config/config_load.cpp only; the interface is config/config_registry.h): one entry per key, declared in the table
// of config_registry.cpp.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/config_registry.h"

namespace t5scale::config_internal {

using Reason = std::optional<std::string>;  // nullopt = fine

struct Entry {
  ConfigKeyInfo info;
  std::function<std::string(const RunConfig&)> text;               // unquoted
  std::function<std::string(const RunConfig&)> yaml;               // as to_yaml writes it
  std::function<Reason(RunConfig&, const std::string& text)> set;  // type check
  std::function<Reason(const RunConfig&)> check;                   // range / allowed values
  std::function<bool(const RunConfig&, const RunConfig&)> equal;
};

inline std::pair<std::string, std::string> split_key(const std::string& key) {
  const size_t dot = key.find('.');
  if (dot == std::string::npos) return {"", key};
  return {key.substr(0, dot), key.substr(dot + 1)};
}

// Every key, in the schema's order (jobs/CONFIG_REFERENCE.md).
const std::vector<Entry>& registry();

}  // namespace t5scale::config_internal
