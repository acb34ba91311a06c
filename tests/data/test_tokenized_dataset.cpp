// The tokenized dataset file: what the writer appends the reader gives back (by example, in batches, across chunk
// boundaries), the statistics, the temporary-name-then-rename rule, byte-identical output, and each damaged or
// mismatched file refused with a message naming the file (files damaged here with the HDF5 C API).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/check.h"
#include "data/tokenized_dataset.h"
#include "support/base_test_support.h"

namespace t5scale {
namespace {

using testing::error_of;
using testing::read_bytes;
using testing::TempDir;

TokenizedDatasetInfo test_info(int64_t vocab_size = 50) {
  TokenizedDatasetInfo info;
  info.tokenizer_sha256 = std::string(64, 'a');
  info.tokenizer_file = "spiece.model";
  info.vocab_size = vocab_size;
  info.recipe_name = "test";
  info.recipe_yaml = "name: test\nsource_template: \"{a}\"\n";
  info.max_source_length = 16;
  info.max_target_length = 8;
  info.created_by = "t5scale-prep test";
  info.input_files = "a.jsonl,b.jsonl";
  info.added_tokens = {"<sep>", "<question>"};
  return info;
}

// A sequence of `length` ids in [3, vocab) ending with eos.
std::vector<int32_t> sequence(std::mt19937& rng, int64_t length, int64_t vocab_size) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i + 1 < length; ++i) ids.push_back(static_cast<int32_t>(3 + rng() % (vocab_size - 3)));
  ids.push_back(1);
  return ids;
}

std::vector<TokenSequences> random_examples(int count, int max_length, int64_t vocab_size, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<TokenSequences> examples;
  for (int i = 0; i < count; ++i) {
    examples.push_back(
        {sequence(rng, 1 + rng() % max_length, vocab_size), sequence(rng, 1 + rng() % max_length, vocab_size)});
  }
  return examples;
}

// Nearest-rank percentile by sorting: the reference the histogram must agree with.
int64_t sorted_percentile(std::vector<int64_t> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto rank = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(p / 100 * values.size())));
  return values[static_cast<size_t>(rank - 1)];
}

std::string write_dataset(const std::string& path, const std::map<std::string, std::vector<TokenSequences>>& splits,
                          int64_t vocab_size = 50) {
  TokenizedDatasetWriter writer(path, test_info(vocab_size));
  for (const auto& [name, examples] : splits) {
    writer.add_split(name);
    for (const auto& e : examples) writer.append(name, e.source, e.target);
  }
  writer.finish();
  return path;
}

// ---- damaging files with the HDF5 C API ----

template <typename T>
void overwrite_element(const std::string& path, const std::string& dataset_path, hsize_t index, T value, hid_t type) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  const hid_t dataset = H5Dopen2(file, dataset_path.c_str(), H5P_DEFAULT);
  ASSERT_GE(dataset, 0);
  const hid_t space = H5Dget_space(dataset);
  const hsize_t one = 1;
  H5Sselect_hyperslab(space, H5S_SELECT_SET, &index, nullptr, &one, nullptr);
  const hid_t memory = H5Screate_simple(1, &one, nullptr);
  EXPECT_GE(H5Dwrite(dataset, type, memory, space, H5P_DEFAULT, &value), 0);
  H5Sclose(memory);
  H5Sclose(space);
  H5Dclose(dataset);
  H5Fclose(file);
}

// Deleted and created again: HDF5 1.10 cannot rewrite an attribute held in dense storage in place.
void replace_int_attribute(const std::string& path, const std::string& object, const std::string& name, int64_t value) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  EXPECT_GE(H5Adelete_by_name(file, object.c_str(), name.c_str(), H5P_DEFAULT), 0);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attribute = H5Acreate_by_name(file, object.c_str(), name.c_str(), H5T_STD_I64LE, space, H5P_DEFAULT,
                                            H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(attribute, 0);
  EXPECT_GE(H5Awrite(attribute, H5T_NATIVE_INT64, &value), 0);
  H5Aclose(attribute);
  H5Sclose(space);
  H5Fclose(file);
}

void replace_string_attribute(const std::string& path, const std::string& name, const std::string& value) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  EXPECT_GE(H5Adelete(file, name.c_str()), 0);
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, value.size());
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attribute = H5Acreate2(file, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
  EXPECT_GE(H5Awrite(attribute, type, value.data()), 0);
  H5Aclose(attribute);
  H5Sclose(space);
  H5Tclose(type);
  H5Fclose(file);
}

void delete_link(const std::string& path, const std::string& link) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  EXPECT_GE(H5Ldelete(file, link.c_str(), H5P_DEFAULT), 0);
  H5Fclose(file);
}

void expect_contains(const std::string& message, const std::vector<std::string>& parts) {
  for (const std::string& part : parts)
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
}

// ---- round trips ----

TEST(PrepDataset, WritesAndReadsBackEveryExample) {
  TempDir dir;
  const std::map<std::string, std::vector<TokenSequences>> splits = {
      {"train", random_examples(300, 40, 50, 1)}, {"validation", random_examples(17, 5, 50, 2)}, {"test", {}}};
  const std::string path = write_dataset(dir / "data.h5", splits);
  const auto dataset = TokenizedDataset::open(path);

  const TokenizedDatasetInfo expected = test_info();
  const TokenizedDatasetInfo& info = dataset->info();
  EXPECT_EQ(info.tokenizer_sha256, expected.tokenizer_sha256);
  EXPECT_EQ(info.tokenizer_file, expected.tokenizer_file);
  EXPECT_EQ(info.vocab_size, 50);
  EXPECT_EQ(info.recipe_name, expected.recipe_name);
  EXPECT_EQ(info.recipe_yaml, expected.recipe_yaml);
  EXPECT_EQ(info.max_source_length, 16);
  EXPECT_EQ(info.max_target_length, 8);
  EXPECT_EQ(info.created_by, expected.created_by);
  EXPECT_EQ(info.input_files, expected.input_files);
  EXPECT_EQ(info.added_tokens, expected.added_tokens);
  EXPECT_EQ(dataset->split_names(), (std::vector<std::string>{"test", "train", "validation"}));

  for (const auto& [name, examples] : splits) {
    const TokenizedSplit& split = dataset->split(name);
    ASSERT_EQ(split.size(), static_cast<int64_t>(examples.size())) << name;
    std::vector<int64_t> source_lengths, target_lengths;
    for (size_t i = 0; i < examples.size(); ++i) {
      const TokenSequences read = split.example(static_cast<int64_t>(i));
      EXPECT_EQ(read.source, examples[i].source) << name << " " << i;
      EXPECT_EQ(read.target, examples[i].target) << name << " " << i;
      EXPECT_EQ(split.source_length(static_cast<int64_t>(i)), static_cast<int64_t>(examples[i].source.size()));
      EXPECT_EQ(split.target_length(static_cast<int64_t>(i)), static_cast<int64_t>(examples[i].target.size()));
      source_lengths.push_back(static_cast<int64_t>(examples[i].source.size()));
      target_lengths.push_back(static_cast<int64_t>(examples[i].target.size()));
    }
    EXPECT_EQ(split.source_lengths(), source_lengths);
    EXPECT_EQ(split.target_lengths(), target_lengths);
    const SplitStatistics& s = split.statistics();
    EXPECT_EQ(s.num_examples, static_cast<int64_t>(examples.size()));
    int64_t source_tokens = 0, target_tokens = 0;
    for (const int64_t length : source_lengths) source_tokens += length;
    for (const int64_t length : target_lengths) target_tokens += length;
    EXPECT_EQ(s.num_source_tokens, source_tokens);
    EXPECT_EQ(s.num_target_tokens, target_tokens);
    EXPECT_EQ(s.source_length_p50, sorted_percentile(source_lengths, 50)) << name;
    EXPECT_EQ(s.source_length_p90, sorted_percentile(source_lengths, 90)) << name;
    EXPECT_EQ(s.source_length_p99, sorted_percentile(source_lengths, 99)) << name;
    EXPECT_EQ(s.source_length_max, sorted_percentile(source_lengths, 100)) << name;
    EXPECT_EQ(s.target_length_p50, sorted_percentile(target_lengths, 50)) << name;
    EXPECT_EQ(s.target_length_p90, sorted_percentile(target_lengths, 90)) << name;
    EXPECT_EQ(s.target_length_p99, sorted_percentile(target_lengths, 99)) << name;
    EXPECT_EQ(s.target_length_max, sorted_percentile(target_lengths, 100)) << name;
  }
}

TEST(PrepDataset, BatchReadGivesTheExamplesInTheOrderAsked) {
  TempDir dir;
  const auto examples = random_examples(200, 30, 50, 3);
  const auto dataset = TokenizedDataset::open(write_dataset(dir / "data.h5", {{"train", examples}}));
  const TokenizedSplit& split = dataset->split("train");
  const std::vector<int64_t> indices = {199, 0, 57, 57, 3, 198, 0, 120};
  const std::vector<TokenSequences> batch = split.examples(indices);
  ASSERT_EQ(batch.size(), indices.size());
  for (size_t k = 0; k < indices.size(); ++k) {
    EXPECT_EQ(batch[k].source, examples[static_cast<size_t>(indices[k])].source) << k;
    EXPECT_EQ(batch[k].target, examples[static_cast<size_t>(indices[k])].target) << k;
  }
  EXPECT_TRUE(split.examples({}).empty());
  expect_contains(error_of([&] {
                    split.examples({5, 200});
                  }),
                  {"data.h5", "'train'", "no example 200", "200 examples"});
  expect_contains(error_of([&] { split.example(-1); }), {"no example -1"});

  // The trainer's view of a split.
  const std::shared_ptr<const TokenizedDataset> shared = TokenizedDataset::open(dir / "data.h5");
  TokenizedSplitExamples source(shared, "train");
  EXPECT_EQ(source.name(), (dir / "data.h5") + ":train");
  EXPECT_EQ(source.size(), 200);
  EXPECT_EQ(source.source_lengths(), split.source_lengths());
  EXPECT_EQ(source.fetch({7})[0].target, examples[7].target);
}

TEST(PrepDataset, ReadsAcrossChunkBoundaries) {
  TempDir dir;
  // 2.5 Mi source tokens (three chunks) and 1.1 Mi + 1 offsets (two chunks of the offsets dataset).
  std::mt19937 rng(5);
  TokenizedDatasetWriter writer(dir / "big.h5", test_info(1000));
  std::vector<TokenSequences> kept;  // every 997th example, to compare
  const int64_t count = 1100000;
  int64_t source_tokens = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t length = i % 1000 == 0 ? 600 : 1 + static_cast<int64_t>(rng() % 3);
    TokenSequences e{sequence(rng, length, 1000), sequence(rng, 1 + rng() % 2, 1000)};
    source_tokens += length;
    writer.append("train", e.source, e.target);
    if (i % 997 == 0 || i == count - 1) kept.push_back(e);
  }
  writer.finish();
  ASSERT_GT(source_tokens, int64_t{2} << 20);
  const auto dataset = TokenizedDataset::open(dir / "big.h5");
  const TokenizedSplit& split = dataset->split("train");
  ASSERT_EQ(split.size(), count);
  EXPECT_EQ(split.statistics().num_source_tokens, source_tokens);
  std::vector<int64_t> indices;
  for (int64_t i = 0; i < count; i += 997) indices.push_back(i);
  indices.push_back(count - 1);
  const auto batch = split.examples(indices);
  for (size_t k = 0; k < indices.size(); ++k) {
    ASSERT_EQ(batch[k].source, kept[k].source) << indices[k];
    ASSERT_EQ(batch[k].target, kept[k].target) << indices[k];
  }
  split.check_token_ids();
}

TEST(PrepDataset, WritesUnderATemporaryNameUntilFinished) {
  TempDir dir;
  const std::string path = dir / "data.h5";
  {
    TokenizedDatasetWriter writer(path, test_info());
    writer.append("train", {5, 1}, {6, 1});
    EXPECT_TRUE(std::filesystem::exists(writer.temporary_path()));
    EXPECT_NE(writer.temporary_path().find(path + ".tmp."), std::string::npos);
    EXPECT_FALSE(std::filesystem::exists(path));
    writer.finish();
    EXPECT_FALSE(std::filesystem::exists(writer.temporary_path()));
    EXPECT_TRUE(std::filesystem::exists(path));
  }
  const std::string good = read_bytes(path);
  std::string temporary;
  {
    // A writer that never finishes (an error on the way) leaves the old file alone and no temporary behind.
    TokenizedDatasetWriter writer(path, test_info());
    writer.append("train", {7, 1}, {8, 1});
    temporary = writer.temporary_path();
  }
  EXPECT_FALSE(std::filesystem::exists(temporary));
  EXPECT_EQ(read_bytes(path), good);
}

TEST(PrepDataset, SameExamplesGiveTheSameBytes) {
  TempDir dir;
  const std::map<std::string, std::vector<TokenSequences>> splits = {{"train", random_examples(500, 20, 50, 9)},
                                                                     {"validation", random_examples(20, 20, 50, 8)}};
  const std::string first = read_bytes(write_dataset(dir / "a.h5", splits));
  const std::string second = read_bytes(write_dataset(dir / "b.h5", splits));
  ASSERT_GT(first.size(), 1000u);
  EXPECT_TRUE(first == second) << "two writes of the same examples differ";
}

TEST(PrepDataset, WriterRefusesBadExamples) {
  TempDir dir;
  TokenizedDatasetWriter writer(dir / "data.h5", test_info(50));
  expect_contains(error_of([&] {
                    writer.append("train", {5, 6}, {7, 1});
                  }),
                  {"data.h5", "'train'", "example 0", "source must end with eos"});
  expect_contains(error_of([&] { writer.append("train", {5, 1}, {}); }), {"target must end with eos"});
  expect_contains(error_of([&] {
                    writer.append("train", {5, 50, 1}, {7, 1});
                  }),
                  {"position 1", "token id 50", "[0, 50)"});
  expect_contains(error_of([&] { writer.append("a/b", {5, 1}, {7, 1}); }), {"'a/b'", "not a valid group name"});
}

// ---- refusals ----

TEST(PrepDataset, RefusesATokenIdOutsideTheVocabulary) {
  TempDir dir;
  const auto examples = random_examples(40, 10, 50, 4);
  const std::string path = write_dataset(dir / "data.h5", {{"train", examples}});
  // Example 6's target, position 0 (the examples before it hold target_offsets[6] target tokens).
  int64_t offset = 0;
  for (int i = 0; i < 6; ++i) offset += static_cast<int64_t>(examples[static_cast<size_t>(i)].target.size());
  overwrite_element<int32_t>(path, "/train/target_tokens", static_cast<hsize_t>(offset), 77, H5T_NATIVE_INT32);
  {
    const auto dataset = TokenizedDataset::open(path);
    const TokenizedSplit& split = dataset->split("train");
    const std::vector<std::string> parts = {"data.h5",           "split 'train'", "example 6",
                                            "target position 0", "token id 77",   "[0, 50)"};
    expect_contains(error_of([&] { split.example(6); }), parts);
    expect_contains(error_of([&] { split.examples({2, 6, 9}); }), parts);
    expect_contains(error_of([&] { split.check_token_ids(); }), parts);
    EXPECT_EQ(split.example(5).source, examples[5].source);  // the others still read
  }

  overwrite_element<int32_t>(path, "/train/target_tokens", static_cast<hsize_t>(offset), -3, H5T_NATIVE_INT32);
  expect_contains(error_of([&] { TokenizedDataset::open(path)->split("train").example(6); }), {"token id -3"});
}

TEST(PrepDataset, RefusesAnotherTokenizer) {
  TempDir dir;
  const auto dataset =
      TokenizedDataset::open(write_dataset(dir / "data.h5", {{"train", random_examples(3, 4, 50, 1)}}));
  const std::string other(64, 'b');
  expect_contains(error_of([&] { dataset->check_tokenizer(other, 50); }),
                  {"data.h5", std::string(64, 'a'), other, "spiece.model"});
  expect_contains(error_of([&] { dataset->check_tokenizer(std::string(64, 'a'), 51); }),
                  {"data.h5", "vocab_size 50", "51"});
  dataset->check_tokenizer(std::string(64, 'a'), 50);
}

TEST(PrepDataset, RefusesATruncatedFile) {
  TempDir dir;
  const std::string path = write_dataset(dir / "data.h5", {{"train", random_examples(2000, 30, 50, 6)}});
  const std::string bytes = read_bytes(path);
  for (const size_t keep : {size_t{100}, size_t{2048}, bytes.size() / 2, bytes.size() - 1}) {
    const std::string cut = dir / ("cut_" + std::to_string(keep) + ".h5");
    std::ofstream(cut, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(keep));
    const std::string message = error_of([&] { TokenizedDataset::open(cut); });
    expect_contains(message, {cut});
    EXPECT_TRUE(message.find("truncated") != std::string::npos || message.find("not an HDF5 file") != std::string::npos)
        << message;
  }
  const std::string empty = dir / "empty.h5";
  std::ofstream(empty).close();
  expect_contains(error_of([&] { TokenizedDataset::open(empty); }), {empty, "not an HDF5 file"});
  const std::string text = dir / "text.h5";
  std::ofstream(text) << "{\"not\": \"hdf5\"}\n";
  expect_contains(error_of([&] { TokenizedDataset::open(text); }), {text, "not an HDF5 file"});
  expect_contains(error_of([&] { TokenizedDataset::open(dir / "absent.h5"); }), {"absent.h5", "no such file"});
}

TEST(PrepDataset, RefusesAMissingSplit) {
  TempDir dir;
  const auto dataset = TokenizedDataset::open(
      write_dataset(dir / "data.h5", {{"train", random_examples(3, 4, 50, 1)}, {"validation", {}}}));
  expect_contains(error_of([&] { dataset->split("test"); }), {"data.h5", "no split 'test'", "train, validation"});
  EXPECT_FALSE(dataset->has_split("test"));
  EXPECT_EQ(dataset->split("validation").size(), 0);
}

TEST(PrepDataset, RefusesBrokenOffsets) {
  TempDir dir;
  const auto examples = random_examples(30, 8, 50, 7);
  const std::map<std::string, std::vector<TokenSequences>> splits = {{"train", examples}};
  struct Case {
    std::string dataset;
    hsize_t index;
    int64_t value;
    std::vector<std::string> parts;
  };
  int64_t total = 0;
  for (const auto& e : examples) total += static_cast<int64_t>(e.source.size());
  const std::vector<Case> cases = {
      {"/train/source_offsets", 0, 1, {"/train/source_offsets must start at 0"}},
      {"/train/source_offsets", 10, 0, {"/train/source_offsets decreases at entry 10"}},
      {"/train/target_offsets", 30, 1000, {"/train/target_offsets ends at 1000"}},
      {"/train/source_offsets", 30, total - 1, {"/train/source_offsets ends at", "tokens"}},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const std::string path = write_dataset(dir / ("offsets_" + std::to_string(k) + ".h5"), splits);
    overwrite_element<int64_t>(path, cases[k].dataset, cases[k].index, cases[k].value, H5T_NATIVE_INT64);
    std::vector<std::string> parts = cases[k].parts;
    parts.push_back(path);
    expect_contains(error_of([&] { TokenizedDataset::open(path); }), parts);
  }
  std::string path = write_dataset(dir / "count.h5", splits);
  replace_int_attribute(path, "/train", "num_examples", 31);
  expect_contains(error_of([&] { TokenizedDataset::open(path); }), {path, "num_examples 31", "30 examples"});
  path = write_dataset(dir / "dataset.h5", splits);
  delete_link(path, "/train/target_offsets");
  expect_contains(error_of([&] { TokenizedDataset::open(path); }), {path, "'train'", "no dataset 'target_offsets'"});
}

TEST(PrepDataset, RefusesAnotherFormatOrSchema) {
  TempDir dir;
  const std::map<std::string, std::vector<TokenSequences>> splits = {{"train", random_examples(3, 4, 50, 1)}};
  std::string path = write_dataset(dir / "format.h5", splits);
  replace_string_attribute(path, "format", "t5scale-run");
  expect_contains(error_of([&] { TokenizedDataset::open(path); }), {path, "format is 't5scale-run'"});
  path = write_dataset(dir / "schema.h5", splits);
  replace_int_attribute(path, "/", "schema_version", 2);
  expect_contains(error_of([&] { TokenizedDataset::open(path); }), {path, "schema_version 2 is not supported"});
  path = write_dataset(dir / "attribute.h5", splits);
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  EXPECT_GE(H5Adelete(file, "vocab_size"), 0);
  H5Fclose(file);
  expect_contains(error_of([&] { TokenizedDataset::open(path); }), {path, "no attribute 'vocab_size'"});
}

TEST(PrepDataset, LongRecipeTextIsKept) {
  TempDir dir;
  TokenizedDatasetInfo info = test_info();
  for (int i = 0; i < 5000; ++i)
    info.recipe_yaml += "# a long comment line in the recipe, line " + std::to_string(i) + "\n";
  ASSERT_GT(info.recipe_yaml.size(), 100000u);  // more than an attribute of the oldest file format may hold
  TokenizedDatasetWriter writer(dir / "data.h5", info);
  writer.append("train", {5, 1}, {6, 1});
  writer.finish();
  EXPECT_EQ(TokenizedDataset::open(dir / "data.h5")->info().recipe_yaml, info.recipe_yaml);
}

TEST(PrepDataset, HistogramPercentilesAreNearestRank) {
  LengthHistogram histogram;
  std::vector<int64_t> values;
  std::mt19937 rng(3);
  for (int i = 0; i < 1001; ++i) {
    const int64_t v = static_cast<int64_t>(rng() % 300);
    histogram.add(v);
    values.push_back(v);
  }
  for (const double p : {1.0, 50.0, 90.0, 99.0, 99.9, 100.0})
    EXPECT_EQ(histogram.percentile(p), sorted_percentile(values, p)) << p;
  EXPECT_EQ(histogram.max(), *std::max_element(values.begin(), values.end()));
  EXPECT_EQ(LengthHistogram().percentile(50), 0);
}

}  // namespace
}  // namespace t5scale
