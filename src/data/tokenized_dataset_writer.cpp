#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "core/check.h"
#include "core/hdf5_attributes.h"
#include "core/hdf5_check.h"
#include "data/tokenized_dataset.h"
#include "data/tokenized_dataset_internal.h"

namespace t5scale {

using namespace tokenized_dataset_internal;

namespace {

// A 1-D extendible chunked dataset of `type` with `chunk` elements per chunk, and no timestamps (so that the same
// content gives the same bytes).
hid_t create_dataset(hid_t group, const char* name, hid_t type, int64_t chunk, const std::string& file) {
  const hsize_t zero = 0, unlimited = H5S_UNLIMITED, chunk_dims = static_cast<hsize_t>(chunk);
  H5Handle space(H5_CHECK(H5Screate_simple(1, &zero, &unlimited), file));
  H5Handle properties(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE), file));
  H5_CHECK(H5Pset_chunk(properties.get(), 1, &chunk_dims), file);
  H5_CHECK(H5Pset_obj_track_times(properties.get(), false), file);
  return H5_CHECK(H5Dcreate2(group, name, type, space.get(), H5P_DEFAULT, properties.get(), H5P_DEFAULT), file);
}

void append_to_dataset(hid_t dataset, hid_t memory_type, const void* data, int64_t count, int64_t* written,
                       const std::string& file) {
  if (count == 0) return;
  const hsize_t start = static_cast<hsize_t>(*written), size = static_cast<hsize_t>(count);
  const hsize_t new_size = start + size;
  H5_CHECK(H5Dset_extent(dataset, &new_size), file);
  H5Handle file_space(H5_CHECK(H5Dget_space(dataset), file));
  H5_CHECK(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &start, nullptr, &size, nullptr), file);
  H5Handle memory_space(H5_CHECK(H5Screate_simple(1, &size, nullptr), file));
  H5_CHECK(H5Dwrite(dataset, memory_type, memory_space.get(), file_space.get(), H5P_DEFAULT, data), file);
  *written += count;
}

// Nearest-rank percentile over sorted lengths: the smallest length with at least ceil(p/100 * n) examples at or
// below it.
int64_t nearest_rank(int64_t n, double p) {
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(p / 100.0 * n)));
}

}  // namespace

// ---- SkipCounts, LengthHistogram ----

SkipCounts& SkipCounts::operator+=(const SkipCounts& other) {
  malformed += other.malformed;
  missing_field += other.missing_field;
  empty_target += other.empty_target;
  invalid_utf8 += other.invalid_utf8;
  unknown_label += other.unknown_label;
  return *this;
}

void LengthHistogram::add(int64_t length) {
  T5S_CHECK(length >= 0, "negative length ", length);
  if (static_cast<size_t>(length) >= counts_.size()) counts_.resize(static_cast<size_t>(length) + 1, 0);
  ++counts_[static_cast<size_t>(length)];
  ++count_;
}

int64_t LengthHistogram::percentile(double p) const {
  T5S_CHECK(p > 0 && p <= 100, "percentile ", p, " is outside (0, 100]");
  if (count_ == 0) return 0;
  const int64_t rank = nearest_rank(count_, p);
  int64_t seen = 0;
  for (size_t length = 0; length < counts_.size(); ++length) {
    seen += counts_[length];
    if (seen >= rank) return static_cast<int64_t>(length);
  }
  return max();
}

int64_t LengthHistogram::max() const {
  for (size_t length = counts_.size(); length > 0; --length) {
    if (counts_[length - 1] > 0) return static_cast<int64_t>(length - 1);
  }
  return 0;
}

// ---- Writer ----

// One sequence kind (source or target) of a split being written: tokens and offsets buffered up to whole chunks.
struct WriterStream {
  int64_t tokens_dataset = -1, offsets_dataset = -1;
  std::vector<int32_t> tokens;   // not yet written
  std::vector<int64_t> offsets;  // not yet written
  int64_t tokens_written = 0, offsets_written = 0;
  int64_t total_tokens = 0;
  LengthHistogram lengths;
  int64_t truncated = 0;
};

struct TokenizedDatasetWriter::Split {
  std::string name;
  int64_t group = -1;
  WriterStream streams[2];  // source, target
  SkipCounts skips;
  int64_t num_examples = 0;
};

TokenizedDatasetWriter::TokenizedDatasetWriter(const std::string& path, const TokenizedDatasetInfo& info)
    : path_(path), temporary_path_(msg(path, ".tmp.", getpid())), info_(info) {
  T5S_CHECK(info.vocab_size > 0, "tokenized dataset '", path, "': vocab_size must be positive, got ", info.vocab_size);
  // The output's folder is made as t5scale-train makes its results folder; a path through a file is refused by name.
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  std::error_code error;
  if (!folder.empty()) std::filesystem::create_directories(folder, error);
  T5S_CHECK(!error, "tokenized dataset '", path, "': cannot make its folder '", folder.string(), "': ", error.message());
  Hdf5Quiet quiet;
  H5Handle access(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS), temporary_path_));
  // The 1.10 format (as the run file): extensible-array chunk indexes (a small file stays small), and attributes
  // over 64 KiB (a long recipe) move to dense storage by themselves. Any HDF5 >= 1.10 (h5py) reads it, whichever
  // version wrote it.
  H5_CHECK(H5Pset_libver_bounds(access.get(), H5F_LIBVER_V110, H5F_LIBVER_V110), temporary_path_);
  H5Handle creation(H5_CHECK(H5Pcreate(H5P_FILE_CREATE), temporary_path_));
  H5_CHECK(H5Pset_obj_track_times(creation.get(), false), temporary_path_);
  // Attributes in the object header (compact: a small file stays small); only an oversized one goes dense.
  H5_CHECK(H5Pset_attr_phase_change(creation.get(), kMaxCompactAttributes, kMinDenseAttributes), temporary_path_);
  file_ = H5_CHECK(H5Fcreate(temporary_path_.c_str(), H5F_ACC_TRUNC, creation.get(), access.get()), temporary_path_);
}

TokenizedDatasetWriter::~TokenizedDatasetWriter() {
  if (finished_) return;
  Hdf5Quiet quiet;
  for (auto& split : splits_) {
    for (auto& stream : split->streams) {
      close_id(stream.tokens_dataset);
      close_id(stream.offsets_dataset);
    }
    close_id(split->group);
  }
  close_id(file_);
  std::remove(temporary_path_.c_str());
}

TokenizedDatasetWriter::Split& TokenizedDatasetWriter::split_of(const std::string& name) {
  for (auto& split : splits_) {
    if (split->name == name) return *split;
  }
  T5S_CHECK(!finished_, "tokenized dataset '", path_, "': the writer has finished");
  T5S_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..", "tokenized dataset '",
            path_, "': split name '", name, "' is not a valid group name");
  Hdf5Quiet quiet;
  auto split = std::make_unique<Split>();
  split->name = name;
  H5Handle properties(H5_CHECK(H5Pcreate(H5P_GROUP_CREATE), temporary_path_));
  H5_CHECK(H5Pset_obj_track_times(properties.get(), false), temporary_path_);
  H5_CHECK(H5Pset_attr_phase_change(properties.get(), kMaxCompactAttributes, kMinDenseAttributes), temporary_path_);
  split->group = H5_CHECK(H5Gcreate2(file_, name.c_str(), H5P_DEFAULT, properties.get(), H5P_DEFAULT), temporary_path_);
  for (auto& stream : split->streams) stream.offsets.push_back(0);
  splits_.push_back(std::move(split));
  return *splits_.back();
}

void TokenizedDatasetWriter::add_split(const std::string& split) { split_of(split); }

void TokenizedDatasetWriter::flush(Split& split, bool finishing) {
  // Whole chunks while appending; everything (and the datasets of a split smaller than one chunk, with a chunk
  // of its own size rather than 4 MiB of padding) at the end.
  Hdf5Quiet quiet;
  for (int kind = 0; kind < 2; ++kind) {
    WriterStream& stream = split.streams[kind];
    const char* tokens_name = kDatasetNames[2 * kind];
    const char* offsets_name = kDatasetNames[2 * kind + 1];
    const int64_t token_count = finishing
                                    ? static_cast<int64_t>(stream.tokens.size())
                                    : static_cast<int64_t>(stream.tokens.size()) / kChunkElements * kChunkElements;
    const int64_t offset_count = finishing
                                     ? static_cast<int64_t>(stream.offsets.size())
                                     : static_cast<int64_t>(stream.offsets.size()) / kChunkElements * kChunkElements;
    if (stream.tokens_dataset < 0 && (finishing || token_count > 0)) {
      stream.tokens_dataset = create_dataset(split.group, tokens_name, H5T_STD_I32LE,
                                             std::clamp<int64_t>(token_count, 1, kChunkElements), temporary_path_);
    }
    if (stream.offsets_dataset < 0 && (finishing || offset_count > 0)) {
      stream.offsets_dataset = create_dataset(split.group, offsets_name, H5T_STD_I64LE,
                                              std::clamp<int64_t>(offset_count, 1, kChunkElements), temporary_path_);
    }
    if (token_count > 0) {
      append_to_dataset(stream.tokens_dataset, H5T_NATIVE_INT32, stream.tokens.data(), token_count,
                        &stream.tokens_written, temporary_path_);
      stream.tokens.erase(stream.tokens.begin(), stream.tokens.begin() + token_count);
    }
    if (offset_count > 0) {
      append_to_dataset(stream.offsets_dataset, H5T_NATIVE_INT64, stream.offsets.data(), offset_count,
                        &stream.offsets_written, temporary_path_);
      stream.offsets.erase(stream.offsets.begin(), stream.offsets.begin() + offset_count);
    }
  }
}

void TokenizedDatasetWriter::append(const std::string& split_name, const int32_t* source, int64_t source_length,
                                    const int32_t* target, int64_t target_length, bool source_truncated,
                                    bool target_truncated) {
  Split& split = split_of(split_name);
  const int32_t* sequences[2] = {source, target};
  const int64_t lengths[2] = {source_length, target_length};
  const bool truncated[2] = {source_truncated, target_truncated};
  for (int kind = 0; kind < 2; ++kind) {
    const char* what = kind == 0 ? "source" : "target";
    T5S_CHECK(lengths[kind] >= 1 && sequences[kind][lengths[kind] - 1] == info_.eos_id, "tokenized dataset '", path_,
              "': split '", split_name, "' example ", split.num_examples, ": the ", what, " must end with eos (",
              info_.eos_id, ")");
    for (int64_t i = 0; i < lengths[kind]; ++i) {
      T5S_CHECK(sequences[kind][i] >= 0 && sequences[kind][i] < info_.vocab_size, "tokenized dataset '", path_,
                "': split '", split_name, "' example ", split.num_examples, " ", what, " position ", i, ": token id ",
                sequences[kind][i], " is outside [0, ", info_.vocab_size, ")");
    }
  }
  for (int kind = 0; kind < 2; ++kind) {
    WriterStream& stream = split.streams[kind];
    stream.tokens.insert(stream.tokens.end(), sequences[kind], sequences[kind] + lengths[kind]);
    stream.total_tokens += lengths[kind];
    stream.offsets.push_back(stream.total_tokens);
    stream.lengths.add(lengths[kind]);
    if (truncated[kind]) ++stream.truncated;
  }
  ++split.num_examples;
  if (static_cast<int64_t>(split.streams[0].tokens.size()) >= kChunkElements ||
      static_cast<int64_t>(split.streams[1].tokens.size()) >= kChunkElements ||
      static_cast<int64_t>(split.streams[0].offsets.size()) >= kChunkElements) {
    flush(split, false);
  }
}

void TokenizedDatasetWriter::append(const std::string& split, const std::vector<int32_t>& source,
                                    const std::vector<int32_t>& target, bool source_truncated, bool target_truncated) {
  append(split, source.data(), static_cast<int64_t>(source.size()), target.data(), static_cast<int64_t>(target.size()),
         source_truncated, target_truncated);
}

void TokenizedDatasetWriter::add_skips(const std::string& split, const SkipCounts& skips) {
  split_of(split).skips += skips;
}

SplitStatistics TokenizedDatasetWriter::statistics(const std::string& split_name) const {
  const Split* split = nullptr;
  for (const auto& s : splits_) {
    if (s->name == split_name) split = s.get();
  }
  T5S_CHECK(split != nullptr, "tokenized dataset '", path_, "': no split '", split_name, "' was written");
  SplitStatistics stats;
  stats.num_examples = split->num_examples;
  const WriterStream& source = split->streams[0];
  const WriterStream& target = split->streams[1];
  stats.num_source_tokens = source.total_tokens;
  stats.num_target_tokens = target.total_tokens;
  stats.source_length_p50 = source.lengths.percentile(50);
  stats.source_length_p90 = source.lengths.percentile(90);
  stats.source_length_p99 = source.lengths.percentile(99);
  stats.source_length_max = source.lengths.max();
  stats.target_length_p50 = target.lengths.percentile(50);
  stats.target_length_p90 = target.lengths.percentile(90);
  stats.target_length_p99 = target.lengths.percentile(99);
  stats.target_length_max = target.lengths.max();
  stats.truncated_sources = source.truncated;
  stats.truncated_targets = target.truncated;
  stats.skipped_malformed = split->skips.malformed;
  stats.skipped_missing_field = split->skips.missing_field;
  stats.skipped_empty_target = split->skips.empty_target;
  stats.skipped_invalid_utf8 = split->skips.invalid_utf8;
  stats.skipped_unknown_label = split->skips.unknown_label;
  return stats;
}

std::vector<std::string> TokenizedDatasetWriter::split_names() const {
  std::vector<std::string> names;
  for (const auto& split : splits_) names.push_back(split->name);
  return names;
}


void TokenizedDatasetWriter::finish() {
  T5S_CHECK(!finished_, "tokenized dataset '", path_, "': finish() called twice");
  Hdf5Quiet quiet;
  const std::string& file = temporary_path_;
  write_attribute(file_, "format", std::string(kTokenizedDatasetFormat), file);
  write_attribute(file_, "schema_version", static_cast<int64_t>(kTokenizedDatasetSchemaVersion), file);
  write_attribute(file_, "tokenizer_sha256", std::string(info_.tokenizer_sha256), file);
  write_attribute(file_, "tokenizer_file", info_.tokenizer_file, file);
  write_attribute(file_, "vocab_size", static_cast<int64_t>(info_.vocab_size), file);
  write_attribute(file_, "pad_id", static_cast<int64_t>(info_.pad_id), file);
  write_attribute(file_, "eos_id", static_cast<int64_t>(info_.eos_id), file);
  write_attribute(file_, "unk_id", static_cast<int64_t>(info_.unk_id), file);
  write_attribute(file_, "recipe_name", info_.recipe_name, file);
  write_attribute(file_, "recipe_yaml", info_.recipe_yaml, file);
  write_attribute(file_, "max_source_length", static_cast<int64_t>(info_.max_source_length), file);
  write_attribute(file_, "max_target_length", static_cast<int64_t>(info_.max_target_length), file);
  write_attribute(file_, "created_by", info_.created_by, file);
  write_attribute(file_, "input_files", info_.input_files, file);
  for (const std::string& token : info_.added_tokens) {
    T5S_CHECK(token.find('\n') == std::string::npos, "tokenized dataset '", path_, "': added token '", token,
              "' holds a line break");
  }
  write_attribute(file_, "added_tokens", join(info_.added_tokens, "\n"), file);
  for (auto& split : splits_) {
    flush(*split, true);
    const SplitStatistics stats = statistics(split->name);
    for (const auto& [name, field] : split_attribute_fields())
      write_attribute(split->group, name, static_cast<int64_t>(stats.*field), file);
    for (auto& stream : split->streams) {
      close_id(stream.tokens_dataset);
      close_id(stream.offsets_dataset);
    }
    close_id(split->group);
  }
  H5_CHECK(H5Fflush(file_, H5F_SCOPE_GLOBAL), file);
  const herr_t closed = H5Fclose(file_);
  file_ = -1;
  H5_CHECK(closed, file);
  std::error_code error;
  std::filesystem::rename(temporary_path_, path_, error);
  T5S_CHECK(!error, "tokenized dataset: cannot rename '", temporary_path_, "' to '", path_, "': ", error.message());
  finished_ = true;
}

}  // namespace t5scale
