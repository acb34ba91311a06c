#include "dist/build_id.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include "core/check.h"

extern "C" const char t5scale_build_id_marker[];  // dist/build_id_marker.cpp

namespace t5scale {

namespace {

constexpr char kMarker[] = "T5SCALE-BUILD-ID:";

}  // namespace

const char* build_id() { return t5scale_build_id_marker + std::strlen(kMarker); }

std::string build_id_in_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = bytes.find(kMarker);
  if (at == std::string::npos) return "";
  const size_t start = at + std::strlen(kMarker);
  const size_t end = bytes.find('\0', start);
  return end == std::string::npos ? "" : bytes.substr(start, end - start);
}

std::string backend_build_mismatch(const std::string& path) {
  const std::string library = build_id_in_file(path);
  if (library == build_id()) return "";
  return msg("the CUDA backend ", path, " comes from another build than this program (the library's build ",
             library.empty() ? std::string("carries no id: an older t5scale") : library, ", the program's ", build_id(),
             "): rebuild t5scale (cmake --build <build folder>), or reinstall the bundle whole, so that bin/ and lib/ "
             "come from one build");
}

}  // namespace t5scale
