// libFuzzer harness of checkpoint manifests: any bytes as a step folder's manifest.json. A bad manifest may give a
// t5scale::Error; nothing else may be thrown, and a manifest that is accepted names only plain file names, each
// the shard of a rank of its own grid, with a size and a checksum: nothing a loader would open lies outside the
// step folder.
// fuzz-sources: src/io/checkpoint_manifest.cpp
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/file_names.h"
#include "fuzz_assert.h"
#include "io/checkpoint_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace t5scale;
  const std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::json manifest;
  try {
    manifest = parse_checkpoint_manifest(text, "step_00000008/manifest.json", 8);
  } catch (const Error&) {
    return 0;
  }
  T5S_FUZZ_ASSERT(manifest.at("step").get<int64_t>() == 8);
  const int64_t tp = manifest.at("identity").at("tp").get<int64_t>(), dp = manifest.at("identity").at("dp").get<int64_t>();
  T5S_FUZZ_ASSERT(tp >= 1 && dp >= 1);
  for (const auto& [name, entry] : manifest.at("files").items()) {
    T5S_FUZZ_ASSERT(plain_file_name_problem(name).empty());
    T5S_FUZZ_ASSERT(name.rfind("rank_tp", 0) == 0);
    T5S_FUZZ_ASSERT(entry.at("bytes").get<int64_t>() >= 0 && entry.at("checksum").get<std::string>().size() == 16);
  }
  T5S_FUZZ_ASSERT(manifest_problems(manifest).empty());
  return 0;
}
