// libFuzzer harness of the CSV reader: any bytes, read under both malformed-record policies. The first byte picks
// the mode: even = the first row is the header, odd = headerless with 1 to 4 named columns.
// fuzz-sources: src/data_prep/text_records.cpp
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_reader_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::vector<std::string> columns;
  if (data[0] & 1) {
    const int n = 1 + (data[0] >> 1) % 4;
    for (int i = 0; i < n; ++i) columns.push_back("c" + std::to_string(i));
  }
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  t5scale::fuzz::check_policies_agree(text, t5scale::InputFormat::kCsv, columns);
  return 0;
}
