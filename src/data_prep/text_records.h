// Streaming readers for the text datasets users bring: JSONL (one JSON object per line) and CSV (RFC 4180). Each
// record comes back as a JSON object with the line it starts on, so that recipes render JSONL and CSV the same way
// and every complaint names "<file>:<line>". Memory is bounded by the longest record, not by the file: inputs of
// tens of GB stream through a fixed-size read buffer.
//
// Both formats:
// - a UTF-8 byte order mark at the very start of the file is skipped (spreadsheet exports write one);
// - a record whose bytes are not valid UTF-8 is skipped and counted (kSkip) or an error (kFail);
// - a malformed record is skipped and counted (kSkip) or an error (kFail); the error reads
//   "<path>:<line>: <reason>";
// - line numbers are 1-based physical lines ("\n" ends a line; a "\r" before it is dropped).
// JSONL: blank (whitespace-only) lines are ignored; a line that is not a JSON object (an array, a number, broken
//   JSON, arrays and objects nested deeper than kMaxJsonDepth) is malformed.
// CSV: the first row is the header (unless the caller names the columns, for headerless files); header names
//   must be non-empty and unique (a bad header is an error under either policy: nothing after it can be read).
//   Fields may be quoted ("a, b", "say ""hi""", newlines inside); a quote inside an unquoted field is kept as a
//   character (as Python's csv module does); text between a closing quote and the next comma is malformed; an
//   unterminated quote at the end of the file is malformed; an empty line is ignored; a row with a different
//   number of fields than the header is malformed. A record's line number is the line it starts on. Every field
//   is a JSON string, keyed by its column name.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace t5scale {

enum class InputFormat { kJsonl, kCsv };

// JSONL records nest arrays and objects at most this deep (copying and printing a value recurse per level).
constexpr int kMaxJsonDepth = 512;
// "jsonl" | "csv"; anything else is an error that names the value.
InputFormat input_format_from_name(const std::string& name);
std::string input_format_name(InputFormat format);

// What a malformed or non-UTF-8 record does: stop with an error (kFail) or get skipped and counted (kSkip).
enum class MalformedPolicy { kFail, kSkip };
// "fail" | "skip"; anything else is an error that names the value.
MalformedPolicy malformed_policy_from_name(const std::string& name);
std::string malformed_policy_name(MalformedPolicy policy);

struct TextRecord {
  int64_t line_number = 0;  // 1-based line of the file on which the record starts
  nlohmann::json fields;    // a JSON object; CSV rows are objects of strings keyed by the header
};

struct TextReadCounts {
  int64_t records = 0;               // records returned by next()
  int64_t skipped_malformed = 0;     // kSkip only
  int64_t skipped_invalid_utf8 = 0;  // kSkip only
};

// Reads a JSONL or CSV file record by record. Not thread-safe; one reader per file.
class TextRecordReader {
 public:
  // Opens `path` (an error names the path and the reason when it cannot be opened or is a directory).
  TextRecordReader(const std::string& path, InputFormat format, MalformedPolicy policy);
  // CSV without a header row: `csv_columns` names the columns and the first line is data. Empty = header row.
  // Ignored for JSONL.
  TextRecordReader(const std::string& path, InputFormat format, MalformedPolicy policy,
                   const std::vector<std::string>& csv_columns);
  // The same reader over bytes in memory; `name` stands in for the path in messages (tests, fuzzing).
  static TextRecordReader from_string(std::string text, const std::string& name, InputFormat format,
                                      MalformedPolicy policy, const std::vector<std::string>& csv_columns = {});
  ~TextRecordReader();
  TextRecordReader(TextRecordReader&&) noexcept;
  TextRecordReader& operator=(TextRecordReader&&) noexcept;

  // The next record; false at the end of the file. A malformed or non-UTF-8 record throws t5scale::Error
  // "<path>:<line>: <reason>" under kFail and is counted and passed over under kSkip.
  bool next(TextRecord* record);
  const TextReadCounts& counts() const;
  // Bytes of the file consumed so far (through the last record returned), for progress and MB/s.
  int64_t bytes_read() const;
  // The file's size at open; -1 when the input is not a regular file (a pipe).
  int64_t file_size_bytes() const;
  const std::string& path() const;
  // The CSV column names (from the header row, which this reads now if no record has been read yet, or from the
  // caller); empty for JSONL and for an empty CSV file.
  const std::vector<std::string>& csv_columns() const;

 private:
  struct State;
  explicit TextRecordReader(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// Strict UTF-8: no overlong forms, no surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no truncated sequences.
bool is_valid_utf8(std::string_view text);

}  // namespace t5scale
