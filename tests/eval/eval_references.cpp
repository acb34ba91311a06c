// Loading of the generation-metric reference file.
#include "eval/eval_references.h"

#include <cstdlib>
#include <fstream>
#include <stdexcept>

namespace t5scale::testing {
namespace {

constexpr int kFormatVersion = 1;  // make_eval_references.py's FORMAT_VERSION

nlohmann::json load() {
  const char* path = std::getenv("T5SCALE_EVAL_REFERENCES");
  if (path == nullptr || *path == '\0') {
    throw std::runtime_error(
        "T5SCALE_EVAL_REFERENCES is not set: run these tests through ctest (unit.python_references writes the "
        "file), or run tests/eval/make_eval_references.py OUT.json and point the variable at OUT.json");
  }
  std::ifstream in(path);
  if (!in) throw std::runtime_error(std::string("cannot open ") + path + " (T5SCALE_EVAL_REFERENCES)");
  nlohmann::json references = nlohmann::json::parse(in);
  if (references.value("format_version", 0) != kFormatVersion) {
    throw std::runtime_error(std::string(path) + ": format_version " +
                             references.value("format_version", nlohmann::json()).dump() + ", expected " +
                             std::to_string(kFormatVersion) + "; regenerate it");
  }
  return references;
}

}  // namespace

const nlohmann::json& eval_references() {
  static const nlohmann::json references = load();
  return references;
}

std::string bytes_from_hex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

}  // namespace t5scale::testing
