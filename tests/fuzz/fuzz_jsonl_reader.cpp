// libFuzzer harness of the JSONL reader: any bytes, read under both malformed-record policies.
// fuzz-sources: src/data_prep/text_records.cpp
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_reader_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  t5scale::fuzz::check_policies_agree(text, t5scale::InputFormat::kJsonl, {});
  return 0;
}
