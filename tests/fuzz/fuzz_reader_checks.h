// Invariants shared by the JSONL and CSV reader harnesses. Bad input may give a t5scale::Error, never another
// exception, a crash, or records that break what the readers promise; a broken promise aborts (a finding).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/check.h"
#include "data_prep/text_records.h"
#include "fuzz_assert.h"

namespace t5scale::fuzz {


struct ReadResult {
  std::vector<TextRecord> records;
  TextReadCounts counts;
  bool threw = false;
  int64_t bytes_read = 0;
};

// Reads all of `text`; checks each record as it comes.
inline ReadResult read_everything(const std::string& text, InputFormat format, MalformedPolicy policy,
                                  const std::vector<std::string>& columns) {
  ReadResult result;
  try {
    TextRecordReader reader = TextRecordReader::from_string(text, "fuzz", format, policy, columns);
    TextRecord record;
    int64_t last_line = 0;
    int64_t last_bytes = 0;
    while (reader.next(&record)) {
      T5S_FUZZ_ASSERT(record.fields.is_object());
      T5S_FUZZ_ASSERT(record.line_number > last_line);
      last_line = record.line_number;
      T5S_FUZZ_ASSERT(reader.bytes_read() > last_bytes && reader.bytes_read() <= static_cast<int64_t>(text.size()));
      last_bytes = reader.bytes_read();
      if (format == InputFormat::kCsv) {
        T5S_FUZZ_ASSERT(record.fields.size() == reader.csv_columns().size());
        for (const auto& [key, value] : record.fields.items()) {
          T5S_FUZZ_ASSERT(value.is_string());
          T5S_FUZZ_ASSERT(is_valid_utf8(value.get_ref<const std::string&>()));
        }
      }
      (void)record.fields.dump();  // throws on a string that is not UTF-8: every string must be
      result.records.push_back(record);
    }
    result.counts = reader.counts();
    result.bytes_read = reader.bytes_read();
    T5S_FUZZ_ASSERT(result.bytes_read == static_cast<int64_t>(text.size()));  // the end means all bytes seen
    T5S_FUZZ_ASSERT(result.counts.records == static_cast<int64_t>(result.records.size()));
    TextRecord after;
    T5S_FUZZ_ASSERT(!reader.next(&after));  // stays at the end
  } catch (const Error&) {
    result.threw = true;
  }
  if (policy == MalformedPolicy::kFail) {
    T5S_FUZZ_ASSERT(result.counts.skipped_malformed == 0 && result.counts.skipped_invalid_utf8 == 0);
  }
  return result;
}

// Skip and fail read the same records until the first bad one: with nothing skipped, fail reads all of them
// without an error; otherwise fail stops with an error after a prefix of skip's records.
inline void check_policies_agree(const std::string& text, InputFormat format, const std::vector<std::string>& columns) {
  const ReadResult skip = read_everything(text, format, MalformedPolicy::kSkip, columns);
  const ReadResult fail = read_everything(text, format, MalformedPolicy::kFail, columns);
  const bool skipped = skip.counts.skipped_malformed + skip.counts.skipped_invalid_utf8 > 0;
  if (skip.threw) {
    T5S_FUZZ_ASSERT(format == InputFormat::kCsv && fail.threw);  // only a bad CSV header stops a skip read
    return;
  }
  T5S_FUZZ_ASSERT(fail.threw == skipped);
  T5S_FUZZ_ASSERT(fail.records.size() <= skip.records.size());
  for (size_t i = 0; i < fail.records.size(); ++i) {
    T5S_FUZZ_ASSERT(fail.records[i].line_number == skip.records[i].line_number);
    T5S_FUZZ_ASSERT(fail.records[i].fields == skip.records[i].fields);
  }
}

}  // namespace t5scale::fuzz
