// Replays every libFuzzer harness (tests/fuzz/fuzz_*.cpp, built here without libFuzzer) over its seed corpus and
// its saved crash reproducers, so that CI re-checks what fuzzing found without clang or sanitizers.
//   t5scale_fuzz_replay <corpus-root> <regressions-root>
// reads <root>/<harness>/* for each harness. A harness with no input at all is a failure (a corpus is part of a
// harness); an escaping exception is a failure; a broken invariant aborts.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_harness_registry.h"

namespace {

std::vector<std::filesystem::path> files_under(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  if (!std::filesystem::is_directory(dir)) return files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <corpus-root> <regressions-root>\n", argv[0]);
    return 2;
  }
  int failures = 0;
  for (size_t h = 0; h < t5scale_fuzz::kHarnessCount; ++h) {
    const t5scale_fuzz::Harness& harness = t5scale_fuzz::kHarnesses[h];
    size_t counts[2] = {0, 0};
    for (int kind = 0; kind < 2; ++kind) {
      for (const auto& path : files_under(std::filesystem::path(argv[1 + kind]) / harness.name)) {
        std::ifstream in(path, std::ios::binary);
        const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        try {
          harness.run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
        } catch (const std::exception& e) {
          std::fprintf(stderr, "%s: %s: uncaught exception: %s\n", harness.name, path.c_str(), e.what());
          ++failures;
        }
        ++counts[kind];
      }
    }
    std::printf("%s: %zu corpus inputs, %zu regression inputs replayed\n", harness.name, counts[0], counts[1]);
    if (counts[0] + counts[1] == 0) {
      std::fprintf(stderr, "%s: no inputs under %s/%s: add a seed corpus\n", harness.name, argv[1], harness.name);
      ++failures;
    }
  }
  if (t5scale_fuzz::kHarnessCount == 0) {
    std::fprintf(stderr, "no harnesses\n");
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
