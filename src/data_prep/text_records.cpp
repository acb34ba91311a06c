#include "data_prep/text_records.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <utility>

#include "core/check.h"

namespace t5scale {
namespace {

// The read size: large enough that a read costs little per byte, small enough to be nothing next to RAM. The
// buffer grows beyond it only to hold a record longer than this.
constexpr size_t kReadChunkBytes = size_t{1} << 20;

bool is_json_whitespace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// nlohmann's messages start with "[json.exception.parse_error.101] "; the id means nothing to a user.
std::string json_reason(const std::exception& e) {
  std::string text = e.what();
  if (!text.empty() && text.front() == '[') {
    auto close = text.find("] ");
    if (close != std::string::npos) text.erase(0, close + 2);
  }
  return text;
}

const char* json_type_name(const nlohmann::json& value) { return value.type_name(); }

// Whether arrays and objects nest deeper than `limit` in a JSON text (outside strings). nlohmann parses any depth
// without recursion, but copying, comparing and printing a value recurse once per level: a line of 100,000 '['
// would overflow the stack when a recipe renders it. No dataset nests anywhere near the limit.
bool nests_deeper_than(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

}  // namespace

InputFormat input_format_from_name(const std::string& name) {
  if (name == "jsonl") return InputFormat::kJsonl;
  if (name == "csv") return InputFormat::kCsv;
  throw Error(msg("unknown input format '", name, "' (expected jsonl or csv)"));
}

std::string input_format_name(InputFormat format) { return format == InputFormat::kJsonl ? "jsonl" : "csv"; }

MalformedPolicy malformed_policy_from_name(const std::string& name) {
  if (name == "fail") return MalformedPolicy::kFail;
  if (name == "skip") return MalformedPolicy::kSkip;
  throw Error(msg("unknown malformed-record policy '", name, "' (expected fail or skip)"));
}

std::string malformed_policy_name(MalformedPolicy policy) {
  return policy == MalformedPolicy::kFail ? "fail" : "skip";
}

bool is_valid_utf8(std::string_view text) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    // ASCII runs are most of most datasets: test eight bytes at a time.
    while (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, bytes + i, 8);
      if (word & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    const unsigned char c = bytes[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t length;
    uint32_t min_code;
    uint32_t code;
    if (c >= 0xC2 && c <= 0xDF) {  // 0xC0, 0xC1 could only start overlong forms
      length = 2, min_code = 0x80, code = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      length = 3, min_code = 0x800, code = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4, min_code = 0x10000, code = c & 0x07;
    } else {
      return false;  // a continuation byte without a lead, or a lead byte above U+10FFFF
    }
    if (i + length > n) return false;
    for (size_t k = 1; k < length; ++k) {
      const unsigned char continuation = bytes[i + k];
      if ((continuation & 0xC0) != 0x80) return false;
      code = (code << 6) | (continuation & 0x3F);
    }
    if (code < min_code || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return false;
    i += length;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------------------------
// The reader's state: a byte window over the file (or over a string in memory) and the parser's position in it.

struct TextRecordReader::State {
  std::string path;
  InputFormat format = InputFormat::kJsonl;
  MalformedPolicy policy = MalformedPolicy::kFail;
  std::vector<std::string> columns;  // CSV
  bool header_pending = false;       // CSV with a header row not read yet
  TextReadCounts counts;
  int64_t file_size_bytes = -1;

  std::FILE* file = nullptr;      // null when reading from memory
  std::string buffer;             // bytes [0, end) are valid; `pos` is the next one to parse
  size_t pos = 0;
  size_t end = 0;
  bool at_eof = false;
  bool start_checked = false;     // the BOM test at the start of the input is done
  int64_t offset_of_buffer = 0;   // file offset of buffer[0]
  int64_t bytes_done = 0;         // file offset after the last record handed out or passed over
  int64_t line = 1;               // line of buffer[pos]

  // CSV scratch, kept between records to reuse allocations.
  std::vector<std::string> csv_fields;

  ~State() {
    if (file != nullptr) std::fclose(file);
  }

  // Makes more bytes available after `end`, keeping [pos, end). False when the input has no more.
  bool refill() {
    if (at_eof) return false;
    if (pos > 0) {  // drop what is parsed
      std::memmove(&buffer[0], buffer.data() + pos, end - pos);
      offset_of_buffer += static_cast<int64_t>(pos);
      end -= pos;
      pos = 0;
    }
    // Grow geometrically, so that a record of n bytes costs O(n) copies, not O(n^2 / chunk).
    if (buffer.size() - end < kReadChunkBytes) buffer.resize(std::max(end + kReadChunkBytes, 2 * buffer.size()));
    const size_t got = std::fread(&buffer[end], 1, buffer.size() - end, file);
    if (got == 0) {
      if (std::ferror(file)) throw Error(msg(path, ": read error: ", std::strerror(errno)));
      at_eof = true;
      return false;
    }
    end += got;
    return true;
  }

  // The UTF-8 byte order mark, only at the very start of the input.
  void skip_bom() {
    start_checked = true;
    while (end - pos < 3 && refill()) {
    }
    if (end - pos >= 3 && std::memcmp(buffer.data() + pos, "\xEF\xBB\xBF", 3) == 0) pos += 3;
    bytes_done = offset_of_buffer + static_cast<int64_t>(pos);
  }

  int get() {
    if (pos == end && !refill()) return EOF;
    return static_cast<unsigned char>(buffer[pos++]);
  }
  int peek() {
    if (pos == end && !refill()) return EOF;
    return static_cast<unsigned char>(buffer[pos]);
  }

  void mark_done() { bytes_done = offset_of_buffer + static_cast<int64_t>(pos); }

  // A bad record: an error under kFail; under kSkip counted (in `counter`) and false returned.
  bool reject(int64_t record_line, const std::string& reason, int64_t* counter) {
    if (policy == MalformedPolicy::kFail) throw Error(msg(path, ":", record_line, ": ", reason));
    ++*counter;
    mark_done();
    return false;
  }

  bool next_jsonl(TextRecord* record);
  bool next_csv(TextRecord* record);
  // CSV: parses one row into csv_fields. Returns 0 at the end of the input, 1 for a row, -1 for a malformed row
  // (with `reason` set; the rest of its line has been passed over). `row_line` is the line it starts on.
  int parse_csv_row(int64_t* row_line, std::string* reason);
  void read_csv_header();
};

bool TextRecordReader::State::next_jsonl(TextRecord* record) {
  for (;;) {
    // Find the end of the next line, reading more until it is in the buffer; `scanned` avoids rescanning.
    size_t scanned = pos;
    const char* newline = nullptr;
    for (;;) {
      newline = static_cast<const char*>(std::memchr(buffer.data() + scanned, '\n', end - scanned));
      if (newline != nullptr) break;
      const size_t scanned_from_pos = end - pos;
      if (!refill()) break;
      scanned = pos + scanned_from_pos;
    }
    if (newline == nullptr && pos == end) {
      mark_done();
      return false;
    }
    const size_t line_begin = pos;
    size_t line_end = newline != nullptr ? static_cast<size_t>(newline - buffer.data()) : end;
    pos = newline != nullptr ? line_end + 1 : end;
    const int64_t record_line = line++;
    if (line_end > line_begin && buffer[line_end - 1] == '\r') --line_end;
    std::string_view text(buffer.data() + line_begin, line_end - line_begin);

    bool blank = true;
    for (char c : text) {
      if (!is_json_whitespace(c)) {
        blank = false;
        break;
      }
    }
    if (blank) {
      mark_done();
      continue;
    }
    if (!is_valid_utf8(text)) {
      if (!reject(record_line, "invalid UTF-8", &counts.skipped_invalid_utf8)) continue;
    }
    if (nests_deeper_than(text, kMaxJsonDepth)) {
      if (!reject(record_line, msg("malformed JSON: nested deeper than ", kMaxJsonDepth, " levels"),
                  &counts.skipped_malformed)) {
        continue;
      }
    }
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(text.begin(), text.end());
    } catch (const nlohmann::json::exception& e) {
      if (!reject(record_line, msg("malformed JSON: ", json_reason(e)), &counts.skipped_malformed)) continue;
    }
    if (!value.is_object()) {
      if (!reject(record_line, msg("expected a JSON object, got ", json_type_name(value)),
                  &counts.skipped_malformed)) {
        continue;
      }
    }
    record->line_number = record_line;
    record->fields = std::move(value);
    ++counts.records;
    mark_done();
    return true;
  }
}

int TextRecordReader::State::parse_csv_row(int64_t* row_line, std::string* reason) {
  // Empty lines between rows are passed over.
  for (;;) {
    const int c = peek();
    if (c == EOF) return 0;
    if (c == '\n') {
      ++pos, ++line;
      continue;
    }
    if (c == '\r') {
      // "\r\n" is an empty line; a lone "\r" starts a field.
      if (pos + 1 == end) refill();
      if (pos + 1 < end && buffer[pos + 1] == '\n') {
        pos += 2, ++line;
        continue;
      }
    }
    break;
  }
  *row_line = line;
  size_t count = 0;
  auto field = [&]() -> std::string& {
    if (csv_fields.size() <= count) csv_fields.emplace_back();
    std::string& f = csv_fields[count++];
    f.clear();
    return f;
  };
  // Passes over the rest of a physical line after a malformed row, so that the next row starts on a new line.
  auto resync = [&](const std::string& why) {
    for (;;) {
      const int c = get();
      if (c == EOF) break;
      if (c == '\n') {
        ++line;
        break;
      }
    }
    *reason = why;
    csv_fields.resize(count);
    return -1;
  };
  for (;;) {  // one field per iteration
    std::string& current = field();
    int c = get();
    if (c == '"') {
      for (;;) {
        c = get();
        if (c == EOF) {
          *reason = msg("unterminated quoted field (the quote opened on line ", *row_line, " never closes)");
          csv_fields.resize(count);
          return -1;
        }
        if (c == '"') {
          if (peek() == '"') {
            ++pos;
            current.push_back('"');
            continue;
          }
          break;
        }
        if (c == '\n') ++line;
        current.push_back(static_cast<char>(c));
      }
      c = get();
      if (c == '\r' && peek() == '\n') c = get();
      if (c != ',' && c != '\n' && c != EOF) {
        return resync(msg("unexpected character after a closing quote in field ", count));
      }
    } else {
      while (c != ',' && c != '\n' && c != EOF) {
        if (c == '\r' && peek() == '\n') {
          c = get();
          break;
        }
        current.push_back(static_cast<char>(c));
        c = get();
      }
    }
    if (c == ',') continue;
    if (c == '\n') ++line;
    csv_fields.resize(count);
    return 1;
  }
}

void TextRecordReader::State::read_csv_header() {
  header_pending = false;
  int64_t header_line = 0;
  std::string reason;
  const int got = parse_csv_row(&header_line, &reason);
  if (got == 0) {  // an empty file: no columns, no records
    mark_done();
    return;
  }
  // Nothing after a broken header can be read, so it is an error under either policy.
  if (got < 0) throw Error(msg(path, ":", header_line, ": malformed CSV header: ", reason));
  std::set<std::string> seen;
  for (size_t i = 0; i < csv_fields.size(); ++i) {
    const std::string& name = csv_fields[i];
    if (!is_valid_utf8(name)) throw Error(msg(path, ":", header_line, ": CSV header: invalid UTF-8 in column ", i + 1));
    if (name.empty()) throw Error(msg(path, ":", header_line, ": CSV header: column ", i + 1, " has no name"));
    if (!seen.insert(name).second) {
      throw Error(msg(path, ":", header_line, ": CSV header: column name '", name, "' appears twice"));
    }
  }
  columns = csv_fields;
  mark_done();
}

bool TextRecordReader::State::next_csv(TextRecord* record) {
  if (header_pending) read_csv_header();
  for (;;) {
    int64_t row_line = 0;
    std::string reason;
    const int got = parse_csv_row(&row_line, &reason);
    if (got == 0) {
      mark_done();
      return false;
    }
    if (got < 0) {
      if (!reject(row_line, "malformed CSV: " + reason, &counts.skipped_malformed)) continue;
    }
    if (csv_fields.size() != columns.size()) {
      if (!reject(row_line,
                  msg("malformed CSV: the row has ", csv_fields.size(), " field", csv_fields.size() == 1 ? "" : "s",
                      ", the header has ", columns.size()),
                  &counts.skipped_malformed)) {
        continue;
      }
    }
    bool valid = true;
    for (const std::string& f : csv_fields) {
      if (!is_valid_utf8(f)) {
        valid = false;
        break;
      }
    }
    if (!valid) {
      if (!reject(row_line, "invalid UTF-8", &counts.skipped_invalid_utf8)) continue;
    }
    nlohmann::json fields = nlohmann::json::object();
    for (size_t i = 0; i < columns.size(); ++i) fields[columns[i]] = std::move(csv_fields[i]);
    record->line_number = row_line;
    record->fields = std::move(fields);
    ++counts.records;
    mark_done();
    return true;
  }
}

// ---------------------------------------------------------------------------------------------------------------

namespace {

void check_columns(const std::string& path, const std::vector<std::string>& columns) {
  std::set<std::string> seen;
  for (const std::string& name : columns) {
    if (name.empty()) throw Error(msg(path, ": CSV columns: a column has no name"));
    if (!seen.insert(name).second) throw Error(msg(path, ": CSV columns: column name '", name, "' appears twice"));
  }
}

}  // namespace

TextRecordReader::TextRecordReader(const std::string& path, InputFormat format, MalformedPolicy policy)
    : TextRecordReader(path, format, policy, {}) {}

TextRecordReader::TextRecordReader(const std::string& path, InputFormat format, MalformedPolicy policy,
                                   const std::vector<std::string>& csv_columns)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.path = path;
  s.format = format;
  s.policy = policy;
  if (format == InputFormat::kCsv) {
    check_columns(path, csv_columns);
    s.columns = csv_columns;
    s.header_pending = csv_columns.empty();
  }
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) throw Error(msg("cannot open '", path, "': ", std::strerror(errno)));
  if (S_ISDIR(info.st_mode)) throw Error(msg("cannot read '", path, "': it is a directory"));
  if (S_ISREG(info.st_mode)) s.file_size_bytes = static_cast<int64_t>(info.st_size);
  s.file = std::fopen(path.c_str(), "rb");
  if (s.file == nullptr) throw Error(msg("cannot open '", path, "': ", std::strerror(errno)));
}

TextRecordReader::TextRecordReader(std::unique_ptr<State> state) : state_(std::move(state)) {}

TextRecordReader TextRecordReader::from_string(std::string text, const std::string& name, InputFormat format,
                                               MalformedPolicy policy, const std::vector<std::string>& csv_columns) {
  auto s = std::make_unique<State>();
  s->path = name;
  s->format = format;
  s->policy = policy;
  if (format == InputFormat::kCsv) {
    check_columns(name, csv_columns);
    s->columns = csv_columns;
    s->header_pending = csv_columns.empty();
  }
  s->file_size_bytes = static_cast<int64_t>(text.size());
  s->end = text.size();
  s->buffer = std::move(text);
  s->at_eof = true;
  return TextRecordReader(std::move(s));
}

TextRecordReader::~TextRecordReader() = default;
TextRecordReader::TextRecordReader(TextRecordReader&&) noexcept = default;
TextRecordReader& TextRecordReader::operator=(TextRecordReader&&) noexcept = default;

bool TextRecordReader::next(TextRecord* record) {
  State& s = *state_;
  if (!s.start_checked) s.skip_bom();
  return s.format == InputFormat::kJsonl ? s.next_jsonl(record) : s.next_csv(record);
}

const TextReadCounts& TextRecordReader::counts() const { return state_->counts; }
int64_t TextRecordReader::bytes_read() const { return state_->bytes_done; }
int64_t TextRecordReader::file_size_bytes() const { return state_->file_size_bytes; }
const std::string& TextRecordReader::path() const { return state_->path; }

const std::vector<std::string>& TextRecordReader::csv_columns() const {
  // The header is read with the first record; asking for the columns before that reads it now.
  State& s = *state_;
  if (s.header_pending) {
    if (!s.start_checked) s.skip_bom();
    s.read_csv_header();
  }
  return s.columns;
}

}  // namespace t5scale
