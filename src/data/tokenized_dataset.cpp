#include "data/tokenized_dataset.h"

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <utility>

#include "core/check.h"
#include "core/hdf5_attributes.h"
#include "core/hdf5_check.h"

namespace t5scale {

namespace {

constexpr int64_t kChunkElements = int64_t{1} << 20;  // 1 Mi tokens (4 MiB of int32) per chunk, as the spec says
constexpr unsigned kMaxCompactAttributes = 64, kMinDenseAttributes = 48;  // the root has 15, a split 18
constexpr const char* kDatasetNames[4] = {"source_tokens", "source_offsets", "target_tokens", "target_offsets"};

// ---- HDF5 ----

// Closes a stored id (the classes keep raw ids so that their header needs no hdf5.h) and marks it closed.
void close_id(int64_t& id) { H5Handle closing(static_cast<hid_t>(std::exchange(id, int64_t{-1}))); }

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

namespace {

// The split attributes in the order they are written and read.
std::vector<std::pair<const char*, int64_t SplitStatistics::*>> split_attribute_fields() {
  return {{"num_examples", &SplitStatistics::num_examples},
          {"num_source_tokens", &SplitStatistics::num_source_tokens},
          {"num_target_tokens", &SplitStatistics::num_target_tokens},
          {"source_length_p50", &SplitStatistics::source_length_p50},
          {"source_length_p90", &SplitStatistics::source_length_p90},
          {"source_length_p99", &SplitStatistics::source_length_p99},
          {"source_length_max", &SplitStatistics::source_length_max},
          {"target_length_p50", &SplitStatistics::target_length_p50},
          {"target_length_p90", &SplitStatistics::target_length_p90},
          {"target_length_p99", &SplitStatistics::target_length_p99},
          {"target_length_max", &SplitStatistics::target_length_max},
          {"truncated_sources", &SplitStatistics::truncated_sources},
          {"truncated_targets", &SplitStatistics::truncated_targets},
          {"skipped_malformed", &SplitStatistics::skipped_malformed},
          {"skipped_missing_field", &SplitStatistics::skipped_missing_field},
          {"skipped_empty_target", &SplitStatistics::skipped_empty_target},
          {"skipped_invalid_utf8", &SplitStatistics::skipped_invalid_utf8},
          {"skipped_unknown_label", &SplitStatistics::skipped_unknown_label}};
}

}  // namespace

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
  std::string added;
  for (const std::string& token : info_.added_tokens) {
    T5S_CHECK(token.find('\n') == std::string::npos, "tokenized dataset '", path_, "': added token '", token,
              "' holds a line break");
    added += (added.empty() ? "" : "\n") + token;
  }
  write_attribute(file_, "added_tokens", added, file);
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

// ---- Reader ----

namespace {

// Reads a whole 1-D int64 dataset (the offsets).
std::vector<int64_t> read_offsets(hid_t dataset, const std::string& file, const std::string& where) {
  H5Handle space(H5_CHECK(H5Dget_space(dataset), file));
  const hssize_t count = H5_CHECK(H5Sget_simple_extent_npoints(space.get()), file);
  std::vector<int64_t> values(static_cast<size_t>(count));
  if (count > 0) {
    H5_CHECK(H5Dread(dataset, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), file);
  }
  return values;
}

hid_t open_dataset(hid_t group, const char* name, H5T_class_t expected_class, size_t min_size, size_t max_size,
                   const std::string& file, const std::string& split, int64_t* length) {
  const std::string where = "/" + split + "/" + name;
  const htri_t exists = H5_CHECK(H5Lexists(group, name, H5P_DEFAULT), file);
  T5S_CHECK(exists > 0, "tokenized dataset '", file, "': split '", split, "' has no dataset '", name, "'");
  H5Handle dataset(H5_CHECK(H5Dopen2(group, name, H5P_DEFAULT), file));
  H5Handle type(H5_CHECK(H5Dget_type(dataset.get()), file));
  const size_t size = H5Tget_size(type.get());
  T5S_CHECK(H5Tget_class(type.get()) == expected_class && size >= min_size && size <= max_size, "tokenized dataset '",
            file, "': ", where, " must be ", max_size == 4 ? "int32" : "int64", ", it has another type");
  H5Handle space(H5_CHECK(H5Dget_space(dataset.get()), file));
  T5S_CHECK(H5Sget_simple_extent_ndims(space.get()) == 1, "tokenized dataset '", file, "': ", where,
            " must be one-dimensional");
  hsize_t dims = 0;
  H5_CHECK(H5Sget_simple_extent_dims(space.get(), &dims, nullptr), file);
  // The writer stores every element; an extent beyond the stored bytes is damage (HDF5 would read zeros there).
  const hsize_t stored = H5Dget_storage_size(dataset.get());
  T5S_CHECK(dims <= stored / size, "tokenized dataset '", file, "': ", where, " claims ", dims, " elements but ",
            stored, " bytes are stored: the file is damaged");
  *length = static_cast<int64_t>(dims);
  return dataset.release();
}

void validate_offsets(const std::vector<int64_t>& offsets, int64_t tokens, const std::string& file,
                      const std::string& where) {
  T5S_CHECK(!offsets.empty(), "tokenized dataset '", file, "': ", where, " is empty (it needs n + 1 entries)");
  T5S_CHECK(offsets.front() == 0, "tokenized dataset '", file, "': ", where, " must start at 0, it starts at ",
            offsets.front());
  for (size_t i = 1; i < offsets.size(); ++i) {
    T5S_CHECK(offsets[i] >= offsets[i - 1], "tokenized dataset '", file, "': ", where, " decreases at entry ", i, " (",
              offsets[i - 1], " then ", offsets[i], ")");
  }
  T5S_CHECK(offsets.back() == tokens, "tokenized dataset '", file, "': ", where, " ends at ", offsets.back(),
            " but the token dataset has ", tokens, " tokens");
}

std::vector<int64_t> lengths_of(const std::vector<int64_t>& offsets) {
  std::vector<int64_t> lengths(offsets.size() - 1);
  for (size_t i = 0; i + 1 < offsets.size(); ++i) lengths[i] = offsets[i + 1] - offsets[i];
  return lengths;
}

constexpr const char* kRootWhere = "the file";  // the root group, as messages name it

// Opens `path` read-only once it is known to be an HDF5 file; a truncated or damaged one is an Error with HDF5's
// reason.
hid_t open_hdf5_file(const std::string& path) {
  T5S_CHECK(std::filesystem::is_regular_file(path), "tokenized dataset '", path, "': no such file");
  const htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 <= 0) {
    const std::string reason = is_hdf5 < 0 ? detail::hdf5_error_stack_text() : "no HDF5 signature";
    throw Error(msg("tokenized dataset '", path, "': not an HDF5 file (", reason, ")"));
  }
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) {
    const std::string reason = detail::hdf5_error_stack_text();
    throw Error(
        msg("tokenized dataset '", path, "': cannot open the HDF5 file, it is truncated or damaged (", reason, ")"));
  }
  return file;
}

void check_format_and_schema(hid_t file, const std::string& path) {
  const std::string format = read_required<std::string>(file, "format", path, kRootWhere);
  T5S_CHECK(format == kTokenizedDatasetFormat, "tokenized dataset '", path, "': format is '", format, "', expected '",
            kTokenizedDatasetFormat, "'");
  const int64_t schema = read_required<int64_t>(file, "schema_version", path, kRootWhere);
  T5S_CHECK(schema == kTokenizedDatasetSchemaVersion, "tokenized dataset '", path, "': schema_version ", schema,
            " is not supported (this build reads ", kTokenizedDatasetSchemaVersion, ")");
}

// The added tokens, stored one per line; the attribute is optional.
std::vector<std::string> read_added_tokens(hid_t file, const std::string& path) {
  std::vector<std::string> tokens;
  if (H5_CHECK(H5Aexists(file, "added_tokens"), path) <= 0) return tokens;
  const std::string added = read_required<std::string>(file, "added_tokens", path, kRootWhere);
  for (size_t start = 0; start < added.size();) {
    const size_t end = std::min(added.find('\n', start), added.size());
    tokens.push_back(added.substr(start, end - start));
    start = end + 1;
  }
  return tokens;
}

// The root attributes after format and schema_version, in the order the spec lists them.
TokenizedDatasetInfo read_dataset_info(hid_t file, const std::string& path) {
  TokenizedDatasetInfo info;
  info.tokenizer_sha256 = read_required<std::string>(file, "tokenizer_sha256", path, kRootWhere);
  info.tokenizer_file = read_required<std::string>(file, "tokenizer_file", path, kRootWhere);
  info.vocab_size = read_required<int64_t>(file, "vocab_size", path, kRootWhere);
  info.pad_id = read_required<int64_t>(file, "pad_id", path, kRootWhere);
  info.eos_id = read_required<int64_t>(file, "eos_id", path, kRootWhere);
  info.unk_id = read_required<int64_t>(file, "unk_id", path, kRootWhere);
  info.recipe_name = read_required<std::string>(file, "recipe_name", path, kRootWhere);
  info.recipe_yaml = read_required<std::string>(file, "recipe_yaml", path, kRootWhere);
  info.max_source_length = read_required<int64_t>(file, "max_source_length", path, kRootWhere);
  info.max_target_length = read_required<int64_t>(file, "max_target_length", path, kRootWhere);
  info.created_by = read_required<std::string>(file, "created_by", path, kRootWhere);
  info.input_files = read_required<std::string>(file, "input_files", path, kRootWhere);
  info.added_tokens = read_added_tokens(file, path);
  return info;
}

void check_t5_vocabulary(const TokenizedDatasetInfo& info, const std::string& path) {
  T5S_CHECK(info.vocab_size > 3 && info.vocab_size <= (int64_t{1} << 31), "tokenized dataset '", path, "': vocab_size ",
            info.vocab_size, " is not a vocabulary size");
  T5S_CHECK(info.pad_id == 0 && info.eos_id == 1 && info.unk_id == 2, "tokenized dataset '", path,
            "': T5 needs pad_id=0 eos_id=1 unk_id=2, the file has ", info.pad_id, ", ", info.eos_id, ", ", info.unk_id);
}

// Every group under the root is a split.
std::vector<std::string> split_group_names(hid_t file, const std::string& path) {
  std::vector<std::string> names;
  H5_CHECK(H5Literate(
         file, H5_INDEX_NAME, H5_ITER_INC, nullptr,
         [](hid_t group, const char* name, const H5L_info_t*, void* out) -> herr_t {
           const hid_t object = H5Oopen(group, name, H5P_DEFAULT);
           if (object < 0) return -1;
           if (H5Iget_type(object) == H5I_GROUP) static_cast<std::vector<std::string>*>(out)->push_back(name);
           H5Oclose(object);
           return 0;
         },
         &names), path);
  return names;
}

// One split group, read and checked against itself: its token datasets stay open, its offsets are in memory.
struct SplitContents {
  H5Handle source_tokens, target_tokens;
  int64_t source_token_count = 0, target_token_count = 0;
  std::vector<int64_t> source_offsets, target_offsets;
  SplitStatistics statistics;
  int64_t num_examples() const { return static_cast<int64_t>(source_offsets.size()) - 1; }
};

// Opens the four datasets (all of them before any is read), then reads and checks both offsets.
void read_split_datasets(hid_t group, const std::string& path, const std::string& name, SplitContents& split) {
  int64_t source_offset_count = 0, target_offset_count = 0;
  split.source_tokens = H5Handle(
      open_dataset(group, "source_tokens", H5T_INTEGER, 1, 4, path, name, &split.source_token_count));
  split.target_tokens = H5Handle(
      open_dataset(group, "target_tokens", H5T_INTEGER, 1, 4, path, name, &split.target_token_count));
  H5Handle source_offsets(open_dataset(group, "source_offsets", H5T_INTEGER, 1, 8, path, name, &source_offset_count));
  H5Handle target_offsets(open_dataset(group, "target_offsets", H5T_INTEGER, 1, 8, path, name, &target_offset_count));
  split.source_offsets = read_offsets(source_offsets.get(), path, "/" + name + "/source_offsets");
  split.target_offsets = read_offsets(target_offsets.get(), path, "/" + name + "/target_offsets");
  validate_offsets(split.source_offsets, split.source_token_count, path, "/" + name + "/source_offsets");
  validate_offsets(split.target_offsets, split.target_token_count, path, "/" + name + "/target_offsets");
  T5S_CHECK(split.source_offsets.size() == split.target_offsets.size(), "tokenized dataset '", path, "': split '",
            name, "' has ", split.source_offsets.size() - 1, " sources but ", split.target_offsets.size() - 1,
            " targets");
}

SplitStatistics read_split_statistics(hid_t group, const std::string& path, const std::string& name) {
  SplitStatistics statistics;
  const std::string where = "split '" + name + "'";
  for (const auto& [attribute, field] : split_attribute_fields()) {
    if (std::string(attribute) == "skipped_unknown_label" &&
        H5_CHECK(H5Aexists(group, attribute), path) <= 0) {
      continue;  // beyond the schema's list: optional for other writers
    }
    statistics.*field = read_required<int64_t>(group, attribute, path, where);
  }
  return statistics;
}

void check_statistics_match_datasets(const SplitContents& split, const std::string& path, const std::string& name) {
  const SplitStatistics& statistics = split.statistics;
  T5S_CHECK(statistics.num_examples == split.num_examples(), "tokenized dataset '", path, "': split '", name,
            "' says num_examples ", statistics.num_examples, " but its offsets hold ", split.num_examples(),
            " examples");
  T5S_CHECK(statistics.num_source_tokens == split.source_token_count &&
                statistics.num_target_tokens == split.target_token_count,
            "tokenized dataset '", path, "': split '", name, "' token counts (", statistics.num_source_tokens, ", ",
            statistics.num_target_tokens, ") differ from its datasets (", split.source_token_count, ", ",
            split.target_token_count, ")");
}

SplitContents read_split(hid_t file, const std::string& path, const std::string& name) {
  H5Handle group(H5_CHECK(H5Gopen2(file, name.c_str(), H5P_DEFAULT), path));
  SplitContents split;
  read_split_datasets(group.get(), path, name, split);
  split.statistics = read_split_statistics(group.get(), path, name);
  check_statistics_match_datasets(split, path, name);
  return split;
}

}  // namespace

std::unique_ptr<TokenizedDataset> TokenizedDataset::open(const std::string& path) {
  Hdf5Quiet quiet;
  std::unique_ptr<TokenizedDataset> dataset(new TokenizedDataset());
  dataset->path_ = path;
  dataset->file_ = open_hdf5_file(path);
  const hid_t file = dataset->file_;
  check_format_and_schema(file, path);
  dataset->info_ = read_dataset_info(file, path);
  check_t5_vocabulary(dataset->info_, path);
  for (const std::string& name : split_group_names(file, path)) {
    SplitContents contents = read_split(file, path, name);
    auto split = std::make_unique<TokenizedSplit>();
    split->dataset_ = dataset.get();
    split->name_ = name;
    split->source_tokens_ = contents.source_tokens.release();
    split->target_tokens_ = contents.target_tokens.release();
    split->source_lengths_ = lengths_of(contents.source_offsets);
    split->target_lengths_ = lengths_of(contents.target_offsets);
    split->source_offsets_ = std::move(contents.source_offsets);
    split->target_offsets_ = std::move(contents.target_offsets);
    split->statistics_ = contents.statistics;
    dataset->split_order_.push_back(name);
    dataset->splits_[name] = std::move(split);
  }
  return dataset;
}

TokenizedDataset::~TokenizedDataset() {
  splits_.clear();  // their datasets before the file
  Hdf5Quiet quiet;
  close_id(file_);
}

TokenizedSplit::~TokenizedSplit() {
  Hdf5Quiet quiet;
  close_id(source_tokens_);
  close_id(target_tokens_);
}

std::vector<std::string> TokenizedDataset::split_names() const { return split_order_; }

const TokenizedSplit& TokenizedDataset::split(const std::string& name) const {
  const auto found = splits_.find(name);
  if (found == splits_.end()) {
    std::string available;
    for (const std::string& split : split_order_) available += (available.empty() ? "" : ", ") + split;
    throw Error(msg("tokenized dataset '", path_, "': no split '", name,
                    "' (it has: ", available.empty() ? "none" : available, ")"));
  }
  return *found->second;
}

void TokenizedDataset::check_tokenizer(const std::string& tokenizer_sha256, int64_t vocab_size) const {
  T5S_CHECK(tokenizer_sha256 == info_.tokenizer_sha256, "tokenized dataset '", path_,
            "' was made with the tokenizer of sha256 ", info_.tokenizer_sha256, " ('", info_.tokenizer_file,
            "'), the run's tokenizer has sha256 ", tokenizer_sha256, ": the token ids would mean other words");
  T5S_CHECK(vocab_size == info_.vocab_size, "tokenized dataset '", path_, "' has vocab_size ", info_.vocab_size,
            " but the run's tokenizer has ", vocab_size, " (same model file, other added tokens?)");
}

// ---- TokenizedSplit ----

void TokenizedSplit::check_index(int64_t i) const {
  T5S_CHECK(i >= 0 && i < size(), "tokenized dataset '", dataset_->path_, "': split '", name_, "' has no example ", i,
            " (", size(), " examples)");
}

int64_t TokenizedSplit::source_length(int64_t i) const {
  check_index(i);
  return source_lengths_[static_cast<size_t>(i)];
}

int64_t TokenizedSplit::target_length(int64_t i) const {
  check_index(i);
  return target_lengths_[static_cast<size_t>(i)];
}

void TokenizedSplit::check_ids(const int32_t* ids, int64_t count, int64_t first_token, bool source) const {
  const int64_t vocab_size = dataset_->info_.vocab_size;
  for (int64_t k = 0; k < count; ++k) {
    if (ids[k] >= 0 && ids[k] < vocab_size) continue;
    const std::vector<int64_t>& offsets = source ? source_offsets_ : target_offsets_;
    const int64_t token = first_token + k;
    const int64_t example = std::upper_bound(offsets.begin(), offsets.end(), token) - offsets.begin() - 1;
    throw Error(msg("tokenized dataset '", dataset_->path_, "': split '", name_, "' example ", example, " ",
                    source ? "source" : "target", " position ", token - offsets[static_cast<size_t>(example)],
                    ": token id ", ids[k], " is outside the vocabulary [0, ", vocab_size, ")"));
  }
}

namespace {

// Reads the token ranges [starts[r], starts[r] + counts[r]) of a dataset, in one read, into `out` (concatenated in
// the given order, which must be increasing and non-overlapping).
void read_ranges(hid_t dataset, const std::vector<hsize_t>& starts, const std::vector<hsize_t>& counts,
                 std::vector<int32_t>* out, const std::string& file, const std::string& where) {
  hsize_t total = 0;
  for (const hsize_t count : counts) total += count;
  out->resize(total);
  if (total == 0) return;
  H5Handle file_space(H5_CHECK(H5Dget_space(dataset), file));
  H5_CHECK(H5Sselect_none(file_space.get()), file);
  for (size_t r = 0; r < starts.size(); ++r) {
    if (counts[r] == 0) continue;
    H5_CHECK(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_OR, &starts[r], nullptr, &counts[r], nullptr), file);
  }
  H5Handle memory_space(H5_CHECK(H5Screate_simple(1, &total, nullptr), file));
  H5_CHECK(H5Dread(dataset, H5T_NATIVE_INT32, memory_space.get(), file_space.get(), H5P_DEFAULT, out->data()), file);
}

}  // namespace

TokenSequences TokenizedSplit::example(int64_t i) const { return examples({i}).front(); }

std::vector<TokenSequences> TokenizedSplit::examples(const std::vector<int64_t>& indices) const {
  for (const int64_t i : indices) check_index(i);
  // Distinct indices in file order: one hyperslab union per token dataset, read once, then handed out in the
  // order asked for.
  std::vector<int64_t> distinct(indices);
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  std::vector<std::vector<int32_t>> buffers(2);
  std::vector<std::vector<int64_t>> positions(2, std::vector<int64_t>(distinct.size()));  // of each distinct index
  Hdf5Quiet quiet;
  for (int kind = 0; kind < 2; ++kind) {
    const std::vector<int64_t>& offsets = kind == 0 ? source_offsets_ : target_offsets_;
    std::vector<hsize_t> starts, counts;
    int64_t position = 0;
    for (size_t d = 0; d < distinct.size(); ++d) {
      const auto i = static_cast<size_t>(distinct[d]);
      starts.push_back(static_cast<hsize_t>(offsets[i]));
      counts.push_back(static_cast<hsize_t>(offsets[i + 1] - offsets[i]));
      positions[kind][d] = position;
      position += offsets[i + 1] - offsets[i];
    }
    const char* what = kind == 0 ? "source_tokens" : "target_tokens";
    read_ranges(kind == 0 ? source_tokens_ : target_tokens_, starts, counts, &buffers[kind], dataset_->path_,
                "/" + name_ + "/" + what);
    for (size_t d = 0; d < distinct.size(); ++d) {
      check_ids(buffers[kind].data() + positions[kind][d], static_cast<int64_t>(counts[d]),
                static_cast<int64_t>(starts[d]), kind == 0);
    }
  }
  std::vector<TokenSequences> out(indices.size());
  for (size_t k = 0; k < indices.size(); ++k) {
    const size_t d =
        static_cast<size_t>(std::lower_bound(distinct.begin(), distinct.end(), indices[k]) - distinct.begin());
    for (int kind = 0; kind < 2; ++kind) {
      const std::vector<int64_t>& lengths = kind == 0 ? source_lengths_ : target_lengths_;
      const int64_t length = lengths[static_cast<size_t>(indices[k])];
      const int32_t* begin = buffers[kind].data() + positions[kind][d];
      std::vector<int32_t>& sequence = kind == 0 ? out[k].source : out[k].target;
      sequence.assign(begin, begin + length);
      T5S_CHECK(length >= 1 && sequence.back() == dataset_->info_.eos_id, "tokenized dataset '", dataset_->path_,
                "': split '", name_, "' example ", indices[k], " ", kind == 0 ? "source" : "target",
                " does not end with eos (", dataset_->info_.eos_id, ")");
    }
  }
  return out;
}

void TokenizedSplit::check_token_ids() const {
  Hdf5Quiet quiet;
  for (int kind = 0; kind < 2; ++kind) {
    const std::vector<int64_t>& offsets = kind == 0 ? source_offsets_ : target_offsets_;
    const int64_t total = offsets.back();
    std::vector<int32_t> buffer;
    for (int64_t start = 0; start < total; start += kChunkElements) {
      const auto count = static_cast<hsize_t>(std::min(kChunkElements, total - start));
      read_ranges(kind == 0 ? source_tokens_ : target_tokens_, {static_cast<hsize_t>(start)}, {count}, &buffer,
                  dataset_->path_, "/" + name_ + (kind == 0 ? "/source_tokens" : "/target_tokens"));
      check_ids(buffer.data(), static_cast<int64_t>(count), start, kind == 0);
    }
  }
}

// ---- TokenizedSplitExamples ----

TokenizedSplitExamples::TokenizedSplitExamples(std::shared_ptr<const TokenizedDataset> dataset,
                                               const std::string& split)
    : dataset_(std::move(dataset)), split_(&dataset_->split(split)) {}

std::string TokenizedSplitExamples::name() const { return dataset_->path() + ":" + split_->name(); }

}  // namespace t5scale
