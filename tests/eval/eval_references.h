// The reference values for the generation-metric tests, made by make_eval_references.py (rouge-score, nltk,
// transformers) and found through T5SCALE_EVAL_REFERENCES, which ctest sets after running unit.python_references.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace t5scale::testing {

// The parsed file, read once; throws with the reason when the variable is unset or the file unusable, which
// fails the calling test.
const nlohmann::json& eval_references();

// Comparisons below this absolute difference pass: the C++ code performs the same IEEE operations in the same
// order as the Python references, so any real difference is far larger.
constexpr double kEvalTolerance = 1e-12;

// Bytes from a hex string ("c3af" -> "\xc3\xaf").
std::string bytes_from_hex(const std::string& hex);

}  // namespace t5scale::testing
