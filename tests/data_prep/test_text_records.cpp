// The JSONL and CSV readers on fixture files written here: line numbers, blank lines, CRLF, a byte order mark,
// quoting, malformed records under both policies, invalid UTF-8, empty and missing files, records longer than
// the read buffer. The CSV reader is also compared with Python's csv module on generated files.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "data_prep/text_records.h"
#include "prep_test_support.h"

namespace t5scale {
namespace {

using testing::error_of;
using testing::read_all;
using testing::TempDir;
using testing::write_file;
using nlohmann::json;

// ---- JSONL ----------------------------------------------------------------------------------------------------

TEST(PrepTextRecords, JsonlReadsObjectsWithTheirLineNumbers) {
  TempDir dir;
  // blank and whitespace-only lines are passed over; CRLF endings; no newline after the last line
  const std::string path = write_file(dir, "a.jsonl",
                                      "{\"a\": 1, \"b\": \"x\"}\n"
                                      "\n"
                                      "   \t\r\n"
                                      "{\"a\": 2, \"nested\": {\"c\": [1, 2]}}\r\n"
                                      "{\"a\": 3}");
  TextRecordReader reader(path, InputFormat::kJsonl, MalformedPolicy::kFail);
  const auto records = read_all(reader);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].line_number, 1);
  EXPECT_EQ(records[0].fields, json::parse(R"({"a": 1, "b": "x"})"));
  EXPECT_EQ(records[1].line_number, 4);
  EXPECT_EQ(records[1].fields["nested"]["c"][1], 2);
  EXPECT_EQ(records[2].line_number, 5);
  EXPECT_EQ(records[2].fields["a"], 3);
  EXPECT_EQ(reader.counts().records, 3);
  EXPECT_EQ(reader.counts().skipped_malformed, 0);
  EXPECT_EQ(reader.bytes_read(), reader.file_size_bytes());
  EXPECT_EQ(reader.file_size_bytes(), static_cast<int64_t>(std::filesystem::file_size(path)));
}

TEST(PrepTextRecords, JsonlSkipsAByteOrderMarkAtTheStartOnly) {
  TempDir dir;
  const std::string path = write_file(dir, "bom.jsonl", "\xEF\xBB\xBF{\"a\": \"\xEF\xBB\xBFkept\"}\n");
  const auto records = read_all(path, InputFormat::kJsonl);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].fields["a"], "\xEF\xBB\xBFkept");  // inside a value it is a character like any other
  // A BOM at the start of a later line (files joined with cat) is passed over too: nlohmann's parser skips a BOM
  // at the start of its input, which is each line.
  const std::string joined = write_file(dir, "joined.jsonl", "{\"a\": 1}\n\xEF\xBB\xBF{\"a\": 2}\n");
  const auto both = read_all(joined, InputFormat::kJsonl);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[1].fields["a"], 2);
  // Anywhere else it is not JSON.
  const std::string inside = write_file(dir, "inside.jsonl", "{\"a\": 1}\n{\"a\":\xEF\xBB\xBF 2}\n");
  EXPECT_EQ(error_of([&] { read_all(inside, InputFormat::kJsonl); }).rfind(inside + ":2: malformed JSON", 0), 0u);
}

TEST(PrepTextRecords, JsonlMalformedLineFailsWithItsLineNumber) {
  TempDir dir;
  const std::string path = write_file(dir, "bad.jsonl", "{\"a\": 1}\n\n{\"a\": 2,}\n{\"a\": 3}\n");
  TextRecordReader reader(path, InputFormat::kJsonl, MalformedPolicy::kFail);
  TextRecord record;
  ASSERT_TRUE(reader.next(&record));
  const std::string error = error_of([&] { reader.next(&record); });
  EXPECT_EQ(error.rfind(path + ":3: malformed JSON: ", 0), 0u) << error;
  EXPECT_NE(error.find("line 1, column 9"), std::string::npos) << error;  // nlohmann's position within the line
}

TEST(PrepTextRecords, JsonlLineThatIsNotAnObjectIsMalformed) {
  TempDir dir;
  for (const std::string& line : {"[1, 2]", "42", "\"text\"", "null"}) {
    const std::string path = write_file(dir, "x.jsonl", "{\"a\": 1}\n" + line + "\n");
    const std::string error = error_of([&] { read_all(path, InputFormat::kJsonl); });
    EXPECT_EQ(error.rfind(path + ":2: expected a JSON object, got ", 0), 0u) << error;
  }
}

// A line of 100,000 nested arrays parsed fine but overflowed the stack when the record was copied or rendered
// (both recurse per level); such lines are now malformed. The limit itself is allowed.
TEST(PrepTextRecords, JsonlNestingDeeperThanTheLimitIsMalformed) {
  TempDir dir;
  auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  const std::string path = write_file(dir, "deep.jsonl",
                                      "{\"x\": " + nested(kMaxJsonDepth - 1) + ", \"s\": \"[[[[ in a string ]\"}\n" +
                                          "{\"x\": " + nested(100000) + "}\n" +
                                          "{\"x\": " + nested(kMaxJsonDepth) + "}\n");
  TextRecordReader reader(path, InputFormat::kJsonl, MalformedPolicy::kSkip);
  const auto records = read_all(reader);  // copies each record
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].line_number, 1);
  EXPECT_EQ(records[0].fields["x"].dump().size(), 2u * (kMaxJsonDepth - 1));
  EXPECT_EQ(reader.counts().skipped_malformed, 2);
  const std::string error = error_of([&] { read_all(path, InputFormat::kJsonl); });
  EXPECT_EQ(error.rfind(path + ":2: malformed JSON: nested deeper than 512 levels", 0), 0u) << error;
}

TEST(PrepTextRecords, JsonlSkipPolicyCountsAndGoesOn) {
  TempDir dir;
  const std::string path = write_file(dir, "mixed.jsonl",
                                      "{\"a\": 1}\n"
                                      "{broken\n"
                                      "[1]\n"
                                      "{\"a\": \"\xC3\x28\"}\n"  // invalid UTF-8 (0xC3 needs a continuation byte)
                                      "{\"a\": \"\\ud800\"}\n"   // a lone surrogate escape: not valid JSON text
                                      "{\"a\": 6}\n"
                                      "{\"a\": 7");                // cut off at the end of the file
  TextRecordReader reader(path, InputFormat::kJsonl, MalformedPolicy::kSkip);
  const auto records = read_all(reader);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].line_number, 1);
  EXPECT_EQ(records[1].line_number, 6);
  EXPECT_EQ(records[1].fields["a"], 6);
  EXPECT_EQ(reader.counts().records, 2);
  EXPECT_EQ(reader.counts().skipped_malformed, 4);
  EXPECT_EQ(reader.counts().skipped_invalid_utf8, 1);
  EXPECT_EQ(reader.bytes_read(), reader.file_size_bytes());
}

TEST(PrepTextRecords, JsonlInvalidUtf8FailsUnderFailPolicy) {
  TempDir dir;
  const std::string path = write_file(dir, "utf.jsonl", "{\"a\": 1}\n{\"a\": \"caf\xE9\"}\n");  // Latin-1 é
  const std::string error = error_of([&] { read_all(path, InputFormat::kJsonl); });
  EXPECT_EQ(error.rfind(path + ":2: invalid UTF-8", 0), 0u) << error;
}

TEST(PrepTextRecords, EmptyAndBlankFilesHaveNoRecords) {
  TempDir dir;
  for (InputFormat format : {InputFormat::kJsonl, InputFormat::kCsv}) {
    for (const std::string& text : {std::string(), std::string("\n\n\r\n"), std::string("\xEF\xBB\xBF")}) {
      const std::string path = write_file(dir, "empty", text);
      TextRecordReader reader(path, format, MalformedPolicy::kFail);
      TextRecord record;
      EXPECT_FALSE(reader.next(&record));
      EXPECT_FALSE(reader.next(&record));  // and stays at the end
      EXPECT_EQ(reader.counts().records, 0);
      EXPECT_EQ(reader.bytes_read(), static_cast<int64_t>(text.size()));
    }
  }
}

TEST(PrepTextRecords, MissingFileAndDirectoryAreErrorsNamingThePath) {
  TempDir dir;
  const std::string missing = dir / "no_such.jsonl";
  const std::string error = error_of([&] { TextRecordReader(missing, InputFormat::kJsonl, MalformedPolicy::kFail); });
  EXPECT_NE(error.find("cannot open '" + missing + "': No such file or directory"), std::string::npos) << error;
  const std::string folder = dir.path().string();
  EXPECT_NE(error_of([&] { TextRecordReader(folder, InputFormat::kCsv, MalformedPolicy::kSkip); })
                .find("'" + folder + "': it is a directory"),
            std::string::npos);
}

TEST(PrepTextRecords, JsonlRecordsLongerThanTheReadBufferAndManySmallOnes) {
  TempDir dir;
  // A 5 MB value (the buffer reads 1 MiB at a time) between thousands of short lines that cross chunk edges.
  std::mt19937 rng(7);
  std::string long_value(5 << 20, 'x');
  for (auto& c : long_value) c = static_cast<char>('a' + rng() % 26);
  std::ostringstream text;
  const int n = 40000;
  std::vector<int64_t> expected_lines;
  int64_t line = 1;
  for (int i = 0; i < n; ++i) {
    if (i == n / 2) {
      text << "{\"i\": -1, \"long\": \"" << long_value << "\"}\n";
      expected_lines.push_back(line++);
    }
    text << "{\"i\": " << i << ", \"pad\": \"" << std::string(i % 97, 'p') << "\"}\r\n";
    expected_lines.push_back(line++);
    if (i % 1000 == 0) {
      text << "\n";
      ++line;
    }
  }
  const std::string path = write_file(dir, "big.jsonl", text.str());
  TextRecordReader reader(path, InputFormat::kJsonl, MalformedPolicy::kFail);
  TextRecord record;
  size_t k = 0;
  int next_i = 0;
  int64_t last_bytes = 0;
  while (reader.next(&record)) {
    ASSERT_LT(k, expected_lines.size());
    EXPECT_EQ(record.line_number, expected_lines[k]);
    if (record.fields["i"] == -1) {
      EXPECT_EQ(record.fields["long"].get<std::string>(), long_value);
    } else {
      ASSERT_EQ(record.fields["i"], next_i);
      ASSERT_EQ(record.fields["pad"].get<std::string>().size(), static_cast<size_t>(next_i % 97));
      ++next_i;
    }
    EXPECT_GT(reader.bytes_read(), last_bytes);  // progress moves with every record
    last_bytes = reader.bytes_read();
    ++k;
  }
  EXPECT_EQ(next_i, n);
  EXPECT_EQ(k, expected_lines.size());
  EXPECT_EQ(reader.bytes_read(), static_cast<int64_t>(text.str().size()));
}

TEST(PrepTextRecords, FromStringReadsLikeAFile) {
  TempDir dir;
  const std::string text = "{\"a\": 1}\n{bad\n{\"a\": 3}\n";
  const std::string path = write_file(dir, "s.jsonl", text);
  TextRecordReader from_file(path, InputFormat::kJsonl, MalformedPolicy::kSkip);
  TextRecordReader from_memory =
      TextRecordReader::from_string(text, "memory", InputFormat::kJsonl, MalformedPolicy::kSkip);
  const auto a = read_all(from_file);
  const auto b = read_all(from_memory);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].line_number, b[i].line_number);
    EXPECT_EQ(a[i].fields, b[i].fields);
  }
  EXPECT_EQ(from_memory.counts().skipped_malformed, 1);
  EXPECT_EQ(error_of([&] {
              auto r = TextRecordReader::from_string(text, "memory", InputFormat::kJsonl, MalformedPolicy::kFail);
              read_all(r);
            }).rfind("memory:2: malformed JSON", 0),
            0u);
}

TEST(PrepTextRecords, FormatAndPolicyNames) {
  EXPECT_EQ(input_format_from_name("jsonl"), InputFormat::kJsonl);
  EXPECT_EQ(input_format_from_name("csv"), InputFormat::kCsv);
  EXPECT_NE(error_of([] { input_format_from_name("json"); }).find("'json'"), std::string::npos);
  EXPECT_EQ(malformed_policy_from_name("skip"), MalformedPolicy::kSkip);
  EXPECT_EQ(malformed_policy_from_name("fail"), MalformedPolicy::kFail);
  EXPECT_NE(error_of([] { malformed_policy_from_name("ignore"); }).find("'ignore'"), std::string::npos);
  EXPECT_EQ(input_format_name(InputFormat::kCsv), "csv");
  EXPECT_EQ(malformed_policy_name(MalformedPolicy::kSkip), "skip");
}

// ---- UTF-8 ----------------------------------------------------------------------------------------------------

TEST(PrepTextRecords, Utf8Validation) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ASCII text that is longer than eight bytes"));
  EXPECT_TRUE(is_valid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xEF\xBF\xBF \xF4\x8F\xBF\xBF"));  // é € 😀 U+FFFF U+10FFFF
  EXPECT_TRUE(is_valid_utf8(std::string_view("a\0b", 3)));  // NUL is a character
  EXPECT_FALSE(is_valid_utf8("caf\xE9"));                   // Latin-1
  EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));                  // overlong '/'
  EXPECT_FALSE(is_valid_utf8("\xE0\x80\xAF"));              // overlong, 3 bytes
  EXPECT_FALSE(is_valid_utf8("\xF0\x80\x80\xAF"));          // overlong, 4 bytes
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));              // surrogate U+D800
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));          // U+110000
  EXPECT_FALSE(is_valid_utf8("\xF5\x80\x80\x80"));
  EXPECT_FALSE(is_valid_utf8("\x80"));                      // a continuation byte alone
  EXPECT_FALSE(is_valid_utf8("abcdefgh\xE2\x82"));          // cut short at the end, after the 8-byte fast path
  EXPECT_FALSE(is_valid_utf8("\xE2\x28\xA1"));
}

// ---- CSV ------------------------------------------------------------------------------------------------------

TEST(PrepTextRecords, CsvQuotingNewlinesAndCrlf) {
  TempDir dir;
  const std::string path = write_file(dir, "a.csv",
                                      "id,text,label\r\n"
                                      "1,plain,pos\r\n"
                                      "2,\"with, comma\",neg\r\n"
                                      "3,\"say \"\"hi\"\"\",pos\r\n"
                                      "4,\"two\nlines\r\nand three\",neg\r\n"
                                      "\r\n"
                                      "5,,\"\"\n"
                                      "6,a\"b,\"\"\"\"\n"
                                      "7,\"last\",x");
  TextRecordReader reader(path, InputFormat::kCsv, MalformedPolicy::kFail);
  const auto records = read_all(reader);
  ASSERT_EQ(records.size(), 7u);
  EXPECT_EQ(reader.csv_columns(), (std::vector<std::string>{"id", "text", "label"}));
  EXPECT_EQ(records[0].fields, json({{"id", "1"}, {"text", "plain"}, {"label", "pos"}}));
  EXPECT_EQ(records[0].line_number, 2);
  EXPECT_EQ(records[1].fields["text"], "with, comma");
  EXPECT_EQ(records[2].fields["text"], "say \"hi\"");
  EXPECT_EQ(records[3].fields["text"], "two\nlines\r\nand three");  // inside quotes, line breaks are data
  EXPECT_EQ(records[3].line_number, 5);
  EXPECT_EQ(records[4].line_number, 9);  // lines 5-7 hold record 4; line 8 is empty
  EXPECT_EQ(records[4].fields, json({{"id", "5"}, {"text", ""}, {"label", ""}}));
  EXPECT_EQ(records[5].fields["text"], "a\"b");  // a quote inside an unquoted field is a character
  EXPECT_EQ(records[5].fields["label"], "\"");
  EXPECT_EQ(records[6].line_number, 11);
  EXPECT_EQ(records[6].fields["label"], "x");
  EXPECT_EQ(reader.bytes_read(), reader.file_size_bytes());
}

TEST(PrepTextRecords, CsvByteOrderMarkBeforeTheHeader) {
  TempDir dir;
  const std::string path = write_file(dir, "bom.csv", "\xEF\xBB\xBFtitle,label\nhello,1\n");
  TextRecordReader reader(path, InputFormat::kCsv, MalformedPolicy::kFail);
  const auto records = read_all(reader);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(reader.csv_columns()[0], "title");  // not "\xEF\xBB\xBFtitle"
  EXPECT_EQ(records[0].fields["title"], "hello");
}

TEST(PrepTextRecords, CsvWrongFieldCountFailsWithTheLineItStartsOn) {
  TempDir dir;
  const std::string path = write_file(dir, "bad.csv", "a,b,c\n1,2,3\n\"x\ny\",2\n");
  const std::string error = error_of([&] { read_all(path, InputFormat::kCsv); });
  EXPECT_EQ(error.rfind(path + ":3: malformed CSV: the row has 2 fields, the header has 3", 0), 0u) << error;
}

TEST(PrepTextRecords, CsvMalformedRowsUnderBothPolicies) {
  TempDir dir;
  const std::string text =
      "a,b\n"
      "1,2\n"
      "\"x\"y,2\n"         // text after a closing quote
      "3,4\n"
      "5,6,7\n"            // one field too many
      "8\n"                // one too few
      "\"caf\xE9\",9\n"    // invalid UTF-8
      "10,11\n"
      "\"open,12\n"        // an unterminated quote runs to the end of the file
      "13,14\n";
  const std::string path = write_file(dir, "m.csv", text);
  TextRecordReader skip(path, InputFormat::kCsv, MalformedPolicy::kSkip);
  const auto records = read_all(skip);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].fields["a"], "1");
  EXPECT_EQ(records[1].fields["a"], "3");
  EXPECT_EQ(records[1].line_number, 4);
  EXPECT_EQ(records[2].fields["a"], "10");
  EXPECT_EQ(records[2].line_number, 8);
  EXPECT_EQ(skip.counts().skipped_malformed, 4);
  EXPECT_EQ(skip.counts().skipped_invalid_utf8, 1);
  EXPECT_EQ(skip.bytes_read(), skip.file_size_bytes());

  const std::string after_quote = error_of([&] { read_all(path, InputFormat::kCsv); });
  EXPECT_EQ(after_quote.rfind(path + ":3: malformed CSV: unexpected character after a closing quote", 0), 0u)
      << after_quote;
  const std::string unterminated = write_file(dir, "u.csv", "a,b\n1,2\n\"open,\n2\n");
  EXPECT_EQ(error_of([&] { read_all(unterminated, InputFormat::kCsv); })
                .rfind(unterminated + ":3: malformed CSV: unterminated quoted field", 0),
            0u);
  const std::string utf = write_file(dir, "utf.csv", "a,b\n1,\"caf\xE9\"\n");
  EXPECT_EQ(error_of([&] { read_all(utf, InputFormat::kCsv); }).rfind(utf + ":2: invalid UTF-8", 0), 0u);
}

TEST(PrepTextRecords, CsvBadHeaderIsAnErrorUnderEitherPolicy) {
  TempDir dir;
  for (MalformedPolicy policy : {MalformedPolicy::kFail, MalformedPolicy::kSkip}) {
    const std::string twice = write_file(dir, "h1.csv", "a,b,a\n1,2,3\n");
    EXPECT_NE(error_of([&] { read_all(twice, InputFormat::kCsv, policy); })
                  .find(twice + ":1: CSV header: column name 'a' appears twice"),
              std::string::npos);
    const std::string unnamed = write_file(dir, "h2.csv", "a,,c\n1,2,3\n");
    EXPECT_NE(error_of([&] { read_all(unnamed, InputFormat::kCsv, policy); }).find("column 2 has no name"),
              std::string::npos);
    const std::string broken = write_file(dir, "h3.csv", "\"a\"x,b\n1,2\n");
    EXPECT_NE(error_of([&] { read_all(broken, InputFormat::kCsv, policy); }).find(":1: malformed CSV header"),
              std::string::npos);
  }
}

TEST(PrepTextRecords, CsvHeaderOnlyAndHeaderlessWithColumns) {
  TempDir dir;
  const std::string header_only = write_file(dir, "h.csv", "label,title,content\r\n");
  TextRecordReader reader(header_only, InputFormat::kCsv, MalformedPolicy::kFail);
  EXPECT_TRUE(read_all(reader).empty());
  EXPECT_EQ(reader.csv_columns().size(), 3u);

  // amazon_review_polarity_csv style: no header, every field quoted.
  const std::string headerless = write_file(dir, "n.csv", "\"2\",\"Great CD\",\"Lovely, \"\"really\"\".\"\n"
                                                          "\"1\",\"Meh\",\"No.\\nJust no.\"\n");
  const auto records = read_all(headerless, InputFormat::kCsv, MalformedPolicy::kFail, {"label", "title", "content"});
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].line_number, 1);
  EXPECT_EQ(records[0].fields, json({{"label", "2"}, {"title", "Great CD"}, {"content", "Lovely, \"really\"."}}));
  EXPECT_EQ(records[1].fields["content"], "No.\\nJust no.");  // the archive's "\n" stays two characters
  EXPECT_NE(error_of([&] { read_all(headerless, InputFormat::kCsv, MalformedPolicy::kFail, {"a", "a"}); })
                .find("column name 'a' appears twice"),
            std::string::npos);
}

TEST(PrepTextRecords, CsvLongQuotedFieldAcrossReadChunks) {
  TempDir dir;
  std::string value;
  for (int i = 0; i < 300000; ++i) value += (i % 50 == 49) ? "\"\"\n" : "ab,";  // quotes, commas, newlines
  std::string expected;
  for (int i = 0; i < 300000; ++i) expected += (i % 50 == 49) ? "\"\n" : "ab,";
  const std::string path = write_file(dir, "long.csv", "k,v\r\n1,\"" + value + "\"\r\n2,end\r\n");
  const auto records = read_all(path, InputFormat::kCsv);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].fields["v"].get<std::string>(), expected);
  EXPECT_EQ(records[1].line_number, 3 + 300000 / 50);
}

// Line ends and quotes that fall on the edge of a read (the reader reads 1 MiB at a time): a filler row puts
// each byte of "\r\n", an empty "\r\n" line and a '""' escape on both sides of the boundary in turn.
TEST(PrepTextRecords, CsvAndJsonlSeparatorsOnTheReadBoundary) {
  TempDir dir;
  const size_t chunk = size_t{1} << 20;
  for (size_t shift = 0; shift < 10; ++shift) {  // the boundary falls after `shift` bytes of "\r\n\r\n\"x\"\"y\""
    const std::string header = "a,b\r\n";
    const std::string filler(chunk - header.size() - 2 - shift, 'f');
    const std::string csv = header + "1," + filler + "\r\n\r\n\"x\"\"y\",2\r\n3,4";
    const auto records = testing::read_all(write_file(dir, "edge.csv", csv), InputFormat::kCsv);
    ASSERT_EQ(records.size(), 3u) << shift;
    EXPECT_EQ(records[0].fields["b"].get<std::string>().size(), filler.size()) << shift;
    EXPECT_EQ(records[1].fields["a"], "x\"y") << shift;
    EXPECT_EQ(records[1].line_number, 4) << shift;
    EXPECT_EQ(records[2].fields["b"], "4") << shift;

    const std::string jsonl = "{\"f\": \"" + filler + "\"}\r\n\r\n{\"a\": 2}\r\n";
    const auto objects = testing::read_all(write_file(dir, "edge.jsonl", jsonl), InputFormat::kJsonl);
    ASSERT_EQ(objects.size(), 2u) << shift;
    EXPECT_EQ(objects[1].line_number, 3) << shift;
    EXPECT_EQ(objects[1].fields["a"], 2) << shift;
  }
}

// Python's csv module (the reference most users check a CSV with) writes random rows, including every awkward
// character, quoted minimally or always, with LF or CRLF line ends; it also reads them back as the expected
// records. The reader must agree row for row.
TEST(PrepTextRecords, CsvAgreesWithPythonsCsvModule) {
  TempDir dir;
  const std::string script = dir / "make.py";
  std::ofstream(script) << R"PY(
import csv, json, random, sys
out = sys.argv[1]
rng = random.Random(11)
alphabet = ['a', 'b', ' ', ',', '"', '\n', '\r\n', 'é', '€', '😀', "'", '\t', ';', 'x y']
for case, (quoting, terminator) in enumerate([(csv.QUOTE_MINIMAL, '\n'), (csv.QUOTE_MINIMAL, '\r\n'),
                                              (csv.QUOTE_ALL, '\r\n'), (csv.QUOTE_NONNUMERIC, '\n')]):
    header = ['id', 'text, with comma', 'quote "q"', 'multi\nline']
    rows = []
    for i in range(300):
        row = [str(i)] + [''.join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12))) for _ in range(3)]
        rows.append(row)
    with open(f'{out}/case{case}.csv', 'w', newline='', encoding='utf-8') as f:
        w = csv.writer(f, quoting=quoting, lineterminator=terminator)
        w.writerow(header)
        w.writerows(rows)
    # Expected: what Python reads back from the file, with the line each record starts on.
    with open(f'{out}/case{case}.csv', newline='', encoding='utf-8') as f:
        reader = csv.reader(f)
        names = next(reader)
        with open(f'{out}/case{case}.expected.jsonl', 'w', encoding='utf-8') as e:
            start = reader.line_num + 1
            for row in reader:
                e.write(json.dumps({'line': start, 'fields': dict(zip(names, row))}, ensure_ascii=False) + '\n')
                start = reader.line_num + 1
)PY";
  const std::string command = std::string(T5SCALE_PREP_TEST_PYTHON) + " " + script + " " + dir.path().string();
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  for (int c = 0; c < 4; ++c) {
    const std::string csv_path = dir / ("case" + std::to_string(c) + ".csv");
    const auto records = read_all(csv_path, InputFormat::kCsv);
    std::ifstream expected_file(dir / ("case" + std::to_string(c) + ".expected.jsonl"));
    std::string line;
    size_t i = 0;
    while (std::getline(expected_file, line)) {
      const json expected = json::parse(line);
      ASSERT_LT(i, records.size()) << csv_path;
      EXPECT_EQ(records[i].fields, expected["fields"]) << csv_path << " record " << i;
      EXPECT_EQ(records[i].line_number, expected["line"].get<int64_t>()) << csv_path << " record " << i;
      ++i;
    }
    EXPECT_EQ(i, 300u);
    EXPECT_EQ(records.size(), i) << csv_path;
  }
}

}  // namespace
}  // namespace t5scale
