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
#include "data/tokenized_dataset_internal.h"

namespace t5scale {

using namespace tokenized_dataset_internal;

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
    throw Error(msg("tokenized dataset '", path_, "': no split '", name,
                    "' (it has: ", split_order_.empty() ? "none" : join(split_order_, ", "), ")"));
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
