// The tokenized dataset file (HDF5, schema 1; layout in the README and below): the writer that
// t5scale-prep appends examples with, and the reader that the trainer opens. Per split, flat int32 token arrays
// with int64 offsets for sources and targets; every sequence ends with eos. No LibTorch here.
//
// The reader keeps the offsets in memory (16 bytes per example and split) and reads tokens by hyperslab, so a
// dataset larger than RAM is served by random access. HDF5 (a thread-safe build) serialises its own calls.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/example_source.h"
#include "data/token_sequences.h"

namespace t5scale {

constexpr const char* kTokenizedDatasetFormat = "t5scale-tokenized-dataset";
constexpr int64_t kTokenizedDatasetSchemaVersion = 1;

// Root attributes.
struct TokenizedDatasetInfo {
  std::string tokenizer_sha256;  // hex of the .model file's bytes, or "synthetic-vocab<V>"
  std::string tokenizer_file;    // as given
  int64_t vocab_size = 0;        // ids are in [0, vocab_size): pieces + sentinels + added tokens
  int64_t pad_id = 0, eos_id = 1, unk_id = 2;
  std::string recipe_name;
  std::string recipe_yaml;
  int64_t max_source_length = 0;  // 0 = no limit
  int64_t max_target_length = 0;
  std::string created_by;   // "t5scale-prep <version>"
  std::string input_files;  // comma-separated, as given
  // Beyond the schema's list (optional when reading): the tokenizer's added tokens in id order (ids
  // vocab_size - n ..), stored one per line, so that Tokenizer::load(file, added_tokens) rebuilds the same ids.
  std::vector<std::string> added_tokens;
  // t5scale-prep synthetic records a made-up tokenizer hash ("synthetic-vocab<V>"): no model file made its ids, and
  // its ids are its text.
  bool made_without_tokenizer() const { return tokenizer_sha256.rfind("synthetic-vocab", 0) == 0; }
};

// Split attributes. Percentiles are nearest-rank: the smallest length that at least p% of the examples have
// or stay under (numpy's percentile(method="inverted_cdf")); 0 for an empty split. Lengths include eos.
struct SplitStatistics {
  int64_t num_examples = 0;
  int64_t num_source_tokens = 0, num_target_tokens = 0;
  int64_t source_length_p50 = 0, source_length_p90 = 0, source_length_p99 = 0, source_length_max = 0;
  int64_t target_length_p50 = 0, target_length_p90 = 0, target_length_p99 = 0, target_length_max = 0;
  int64_t truncated_sources = 0, truncated_targets = 0;
  int64_t skipped_malformed = 0, skipped_missing_field = 0, skipped_empty_target = 0, skipped_invalid_utf8 = 0;
  int64_t skipped_unknown_label = 0;  // beyond the schema's list: a label that label_words does not map
};

// Records that did not become examples, by reason.
struct SkipCounts {
  int64_t malformed = 0, missing_field = 0, empty_target = 0, invalid_utf8 = 0, unknown_label = 0;
  SkipCounts& operator+=(const SkipCounts& other);
  int64_t total() const { return malformed + missing_field + empty_target + invalid_utf8 + unknown_label; }
};

// Exact nearest-rank percentiles from a histogram of lengths (count of examples per length).
class LengthHistogram {
 public:
  void add(int64_t length);
  int64_t count() const { return count_; }
  int64_t percentile(double p) const;  // p in (0, 100]
  int64_t max() const;

 private:
  std::vector<int64_t> counts_;
  int64_t count_ = 0;
};

// Appends examples split by split and writes the file at `path` on finish(): the data goes to
// `<path>.tmp.<pid>`, renamed to `path` once complete. A writer destroyed before finish() removes its temporary
// file, so a failed run never leaves a half-written dataset under the final name. Output bytes depend only on
// the calls made (no timestamps in the file).
class TokenizedDatasetWriter {
 public:
  TokenizedDatasetWriter(const std::string& path, const TokenizedDatasetInfo& info);
  ~TokenizedDatasetWriter();
  TokenizedDatasetWriter(const TokenizedDatasetWriter&) = delete;
  TokenizedDatasetWriter& operator=(const TokenizedDatasetWriter&) = delete;

  // Creates the split's group if it does not exist yet (an empty split is written as one with no examples).
  void add_split(const std::string& split);
  // One example; both sequences must end with eos and hold ids in [0, vocab_size). `*_truncated` count cuts.
  void append(const std::string& split, const int32_t* source, int64_t source_length, const int32_t* target,
              int64_t target_length, bool source_truncated = false, bool target_truncated = false);
  void append(const std::string& split, const std::vector<int32_t>& source, const std::vector<int32_t>& target,
              bool source_truncated = false, bool target_truncated = false);
  void add_skips(const std::string& split, const SkipCounts& skips);

  // The statistics so far (what finish() will write).
  SplitStatistics statistics(const std::string& split) const;
  std::vector<std::string> split_names() const;  // in order of creation
  const std::string& temporary_path() const { return temporary_path_; }

  void finish();

 private:
  struct Split;
  Split& split_of(const std::string& name);
  void flush(Split& split, bool source);

  std::string path_;
  std::string temporary_path_;
  TokenizedDatasetInfo info_;
  int64_t file_ = -1;  // hid_t
  std::vector<std::unique_ptr<Split>> splits_;
  bool finished_ = false;
};

class TokenizedDataset;

// One split of an open dataset. Lengths come from the offsets in memory; tokens are read on demand, each id
// checked against the vocabulary (an id out of range names the file, split, example and position).
class TokenizedSplit {
 public:
  ~TokenizedSplit();
  const std::string& name() const { return name_; }
  int64_t size() const { return static_cast<int64_t>(source_offsets_.size()) - 1; }
  int64_t source_length(int64_t i) const;
  int64_t target_length(int64_t i) const;
  const std::vector<int64_t>& source_offsets() const { return source_offsets_; }  // size() + 1 entries
  const std::vector<int64_t>& target_offsets() const { return target_offsets_; }
  const SplitStatistics& statistics() const { return statistics_; }

  const std::vector<int64_t>& source_lengths() const { return source_lengths_; }  // size() entries, eos included
  const std::vector<int64_t>& target_lengths() const { return target_lengths_; }

  TokenSequences example(int64_t i) const;
  // The examples at `indices` (any order, repeats allowed), in that order; one HDF5 read per token dataset.
  std::vector<TokenSequences> examples(const std::vector<int64_t>& indices) const;
  // Reads every token of the split in chunks and checks its range (the examples read later are checked anyway;
  // this finds a bad id before training starts).
  void check_token_ids() const;

 private:
  friend class TokenizedDataset;
  void check_index(int64_t i) const;
  void check_ids(const int32_t* ids, int64_t count, int64_t first_token, bool source) const;

  const TokenizedDataset* dataset_ = nullptr;
  std::string name_;
  int64_t source_tokens_ = -1, target_tokens_ = -1;  // hid_t of the token datasets
  std::vector<int64_t> source_offsets_, target_offsets_;
  std::vector<int64_t> source_lengths_, target_lengths_;
  SplitStatistics statistics_;
};

class TokenizedDataset {
 public:
  // Opens and validates: the format and schema version, every root and split attribute, the datasets' types and
  // ranks, and the offsets (start at 0, non-decreasing, last = number of tokens, n + 1 of them). Any problem,
  // a truncated or non-HDF5 file included, is a t5scale::Error naming the file.
  static std::unique_ptr<TokenizedDataset> open(const std::string& path);
  ~TokenizedDataset();
  TokenizedDataset(const TokenizedDataset&) = delete;
  TokenizedDataset& operator=(const TokenizedDataset&) = delete;

  const std::string& path() const { return path_; }
  const TokenizedDatasetInfo& info() const { return info_; }
  std::vector<std::string> split_names() const;
  bool has_split(const std::string& name) const { return splits_.count(name) > 0; }
  // The split, or an error naming the file and the splits it has.
  const TokenizedSplit& split(const std::string& name) const;

  // Refuses a dataset made with another tokenizer: the hashes or the vocabulary sizes (pieces + sentinels + added
  // tokens) differ. The message names the file and both hashes (or both sizes).
  void check_tokenizer(const std::string& tokenizer_sha256, int64_t vocab_size) const;

 private:
  TokenizedDataset() = default;
  friend class TokenizedSplit;

  std::string path_;
  int64_t file_ = -1;  // hid_t
  TokenizedDatasetInfo info_;
  std::map<std::string, std::unique_ptr<TokenizedSplit>> splits_;
  std::vector<std::string> split_order_;
};

}  // namespace t5scale

namespace t5scale {

// A split of an open dataset as the trainer's ExampleSource (data/example_source.h). Keeps the dataset open.
class TokenizedSplitExamples final : public ExampleSource {
 public:
  TokenizedSplitExamples(std::shared_ptr<const TokenizedDataset> dataset, const std::string& split);
  std::string name() const override;  // "<file>:<split>"
  const std::vector<int64_t>& source_lengths() const override { return split_->source_lengths(); }
  const std::vector<int64_t>& target_lengths() const override { return split_->target_lengths(); }
  std::vector<TokenSequences> fetch(const std::vector<int64_t>& indices) override { return split_->examples(indices); }

 private:
  std::shared_ptr<const TokenizedDataset> dataset_;
  const TokenizedSplit* split_;
};

}  // namespace t5scale
