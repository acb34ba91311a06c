// Helpers of the data-preparation tests: fixture files written byte for byte, and reading a whole file.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include "data_prep/text_records.h"
#include "support/base_test_support.h"

namespace t5scale::testing {

inline std::string write_file(const TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir / name;
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  out.close();
  EXPECT_TRUE(out.good()) << "cannot write " << path;
  return path;
}

inline std::vector<TextRecord> read_all(TextRecordReader& reader) {
  std::vector<TextRecord> records;
  TextRecord record;
  while (reader.next(&record)) records.push_back(record);
  return records;
}

inline std::vector<TextRecord> read_all(const std::string& path, InputFormat format,
                                        MalformedPolicy policy = MalformedPolicy::kFail,
                                        const std::vector<std::string>& csv_columns = {}) {
  TextRecordReader reader(path, format, policy, csv_columns);
  return read_all(reader);
}

}  // namespace t5scale::testing
