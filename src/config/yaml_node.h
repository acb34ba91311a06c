// How a YAML node is described in messages ("expected a value, got a list"), for the run config and study specs.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

namespace t5scale {

inline std::string yaml_node_kind(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Null: return "no value";
    default: return "a scalar";
  }
}

}  // namespace t5scale
