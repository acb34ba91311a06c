// What the study spec's parser (study_spec.cpp) and its expansion into runs (study_expansion.cpp) share: the
// problems list of one spec, whole-integer parsing and the check of one key = value assignment. Include it from
// those two files only.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/number_text.h"
#include "study/study_spec.h"

namespace t5scale::study_spec_internal {

inline int line_of(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  return mark.is_null() ? 0 : mark.line + 1;
}

// Reads the whole text as an integer or a finite number (core/number_text.h) into `value`; false when it is not one.
inline bool parse_int(const std::string& text, int64_t& value) {
  const std::optional<int64_t> parsed = parse_integer(text);
  if (parsed) value = *parsed;
  return parsed.has_value();
}
inline bool parse_double(const std::string& text, double& value) {
  const std::optional<double> parsed = parse_finite_number(text);
  if (parsed) value = *parsed;
  return parsed.has_value();
}

// Collects the problems of one spec file, each "<source>:<line>: <text>".
class Problems {
 public:
  explicit Problems(std::string source) : source_(std::move(source)) {}
  void add(const YAML::Node& node, const std::string& text) { add(line_of(node), text); }
  void add(int line, const std::string& text) {
    problems_.push_back(line > 0 ? msg(source_, ":", line, ": ", text) : msg(source_, ": ", text));
  }
  void throw_if_any() const {
    if (problems_.empty()) return;
    throw Error(msg(source_, ": invalid study spec:\n  ", join(problems_, "\n  ")));
  }

 private:
  std::string source_;
  std::vector<std::string> problems_;
};

// Checks that `a` names a launch key or a run-config key and that its value has the key's type. Returns false
// (with the problem recorded) otherwise.
bool check_assignment(const SpecAssignment& a, const std::string& where, Problems& problems);

}  // namespace t5scale::study_spec_internal
