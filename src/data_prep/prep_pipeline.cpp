#include "data_prep/prep_pipeline.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "core/fnv1a.h"
#include "data_prep/recipe.h"

namespace t5scale {

namespace {

constexpr size_t kBatchRecords = 1024;
constexpr int64_t kBatchBytes = int64_t{512} << 10;
constexpr uint64_t kTokenizerSampleSalt = 0x746f6b656e697a65ULL;  // a different hash stream for the text sample

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

uint64_t mix64(uint64_t z) {  // the SplitMix64 finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double unit_interval(uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

// ---- What the run reads ----

struct InputPlan {
  std::string path;
  int split = -1;  // index into the split names; -1 = hash split
};

// Everything the passes share, fixed before the first record is read.
struct Context {
  Recipe recipe;
  std::vector<InputPlan> inputs;
  std::vector<std::string> split_names;
  std::map<std::string, double> ratios;  // hash split only
  uint64_t seed = 0;
  int fallback_split = 0;  // where a hash-split input's unreadable lines are counted (they have no id)
  int64_t max_source_length = 0, max_target_length = 0;

  int split_index(const std::string& name) const {
    return static_cast<int>(std::find(split_names.begin(), split_names.end(), name) - split_names.begin());
  }

  // The split of a record that the recipe rendered (`id` from render_example) or could not render (id from the
  // id field if it is there, else the line number).
  int split_of(const InputPlan& input, const TextRecord& record, const std::string* rendered_id) const {
    if (input.split >= 0) return input.split;
    std::string id;
    if (rendered_id != nullptr) {
      id = *rendered_id;
    } else {
      id = std::to_string(record.line_number);
      if (!recipe.id_field.empty()) {
        std::string value, missing;
        try {
          if (render_template("{" + recipe.id_field + "}", record.fields, &value, &missing)) id = value;
        } catch (const Error&) {
          // an id field that is not a plain placeholder: the line number stands in
        }
      }
    }
    return split_index(hash_split(ratios, seed, id));
  }
};

int64_t file_size_or_zero(const std::string& path) {
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  return error ? 0 : static_cast<int64_t>(size);
}

Context make_context(const PrepOptions& options, std::string* split_rule) {
  Context context;
  context.recipe = Recipe::load(options.recipe_path);
  Recipe& recipe = context.recipe;
  if (options.on_malformed) recipe.on_malformed = *options.on_malformed;
  context.seed = static_cast<uint64_t>(options.split_seed ? *options.split_seed : recipe.split_seed);
  context.max_source_length = options.max_source_length ? *options.max_source_length : recipe.max_source_length;
  context.max_target_length = options.max_target_length ? *options.max_target_length : recipe.max_target_length;
  T5S_CHECK(context.max_source_length >= 0 && context.max_target_length >= 0,
            "--max-source-length and --max-target-length must be >= 0 (0 = no limit), got ", context.max_source_length,
            " and ", context.max_target_length);
  T5S_CHECK(context.max_source_length != 1 && context.max_target_length != 1,
            "a maximum length of 1 leaves room for eos only; use 0 (no limit) or >= 2");

  T5S_CHECK(options.inputs.empty() || options.input_splits.empty(),
            "give --input (one input, hash-split) or --input-split NAME=FILE (one input per split), not both");
  T5S_CHECK(options.data_dir.empty() || (options.inputs.empty() && options.input_splits.empty()),
            "--data-dir is for the recipe's split_files; it does not go with --input or --input-split");
  const auto add_split = [&](const std::string& name) {
    if (std::find(context.split_names.begin(), context.split_names.end(), name) == context.split_names.end()) {
      context.split_names.push_back(name);
    }
    return context.split_index(name);
  };
  if (!options.input_splits.empty()) {
    for (const auto& [split, path] : options.input_splits) context.inputs.push_back({path, add_split(split)});
    *split_rule = "one input file per split (--input-split)";
  } else if (!options.inputs.empty()) {
    context.ratios = !options.split_ratios.empty()  ? options.split_ratios
                     : !recipe.split_ratios.empty() ? recipe.split_ratios
                                                    : default_split_ratios();
    double sum = 0;
    for (const auto& [split, ratio] : context.ratios) {
      T5S_CHECK(ratio > 0 && ratio <= 1, "split ratio of '", split, "' must be in (0, 1], got ", ratio);
      sum += ratio;
      add_split(split);
    }
    T5S_CHECK(std::abs(sum - 1) < 1e-6, "split ratios must sum to 1, they sum to ", sum);
    for (const std::string& path : options.inputs) context.inputs.push_back({path, -1});
    // The largest ratio's split (the first by name among equals) holds the lines that cannot be hashed.
    const auto largest = std::max_element(context.ratios.begin(), context.ratios.end(),
                                          [](const auto& a, const auto& b) { return a.second < b.second; });
    context.fallback_split = context.split_index(largest->first);
    std::ostringstream rule;
    rule << "hash split of " << (recipe.id_field.empty() ? "the line number" : "id field '" + recipe.id_field + "'")
         << " with seed " << context.seed << " into";
    for (const auto& [split, ratio] : context.ratios) rule << " " << split << "=" << ratio;
    *split_rule = rule.str();
  } else {
    T5S_CHECK(!recipe.split_files.empty(), "no input: give --input FILE, --input-split NAME=FILE, or split_files in ",
              "the recipe '", options.recipe_path, "'");
    for (const auto& entry : recipe.split_files) {
      const std::string& split = entry.first;
      context.inputs.push_back({recipe.split_file_path(split, options.data_dir), add_split(split)});
    }
    *split_rule = "one input file per split (the recipe's split_files" +
                  (options.data_dir.empty() ? std::string(")") : " in " + options.data_dir + ")");
  }
  for (const InputPlan& input : context.inputs) {
    T5S_CHECK(std::filesystem::exists(input.path), "input '", input.path, "': no such file");
  }
  return context;
}

// Appends the text of a record to the tokenizer's training file, a line per line of text, long lines cut at
// spaces (SentencePiece skips a line longer than its max_sentence_length).
void write_training_lines(const std::string& text, size_t max_line_bytes, std::ofstream& out) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + start, end - start);
    while (!line.empty()) {
      size_t take = line.size();
      if (take > max_line_bytes) {
        take = line.rfind(' ', max_line_bytes);
        if (take == std::string_view::npos || take == 0) {
          take = max_line_bytes;
          while (take > 0 && (static_cast<unsigned char>(line[take]) & 0xc0) == 0x80) --take;  // whole characters
        }
      }
      std::string_view piece = line.substr(0, take);
      while (!piece.empty() && (piece.back() == '\r' || piece.back() == ' ')) piece.remove_suffix(1);
      if (!piece.empty()) out << piece << '\n';
      line.remove_prefix(take);
      while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    }
    start = end + 1;
  }
}

// Removes a file when it goes out of scope.
struct TemporaryFile {
  std::string path;
  ~TemporaryFile() {
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
  }
};

// The folder an output file goes in, made when it is not there (as `--out data/x.h5` on a fresh clone expects);
// a path whose folder cannot be made is refused naming the option, the folder and the reason.
void create_parent_folder(const std::string& path, const char* option) {
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  if (folder.empty()) return;
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  T5S_CHECK(!error && std::filesystem::is_directory(folder), option, " ", path, ": cannot make its folder '",
            folder.string(), "': ", error ? error.message() : "a file of that name is in the way");
}

// First pass when training a tokenizer: the train split's sources and targets (every split's when there is no
// "train"), sampled by a seeded hash when the inputs are larger than the budget, then SentencePiece.
void train_tokenizer_for(const Context& context, const PrepOptions& options) {
  const std::string suffix = ".model";
  T5S_CHECK(options.tokenizer_out.size() > suffix.size() &&
                options.tokenizer_out.compare(options.tokenizer_out.size() - suffix.size(), suffix.size(), suffix) == 0,
            "--train-tokenizer needs --tokenizer-out FILE.model, got '", options.tokenizer_out, "'");
  const int train = context.split_index("train");
  const bool all_splits = train == static_cast<int>(context.split_names.size());
  int64_t total_bytes = 0;
  for (const InputPlan& input : context.inputs) {
    if (all_splits || input.split < 0 || input.split == train) total_bytes += file_size_or_zero(input.path);
  }
  const double keep = total_bytes > options.tokenizer_text_max_bytes
                          ? static_cast<double>(options.tokenizer_text_max_bytes) / static_cast<double>(total_bytes)
                          : 1.0;
  create_parent_folder(options.tokenizer_out, "--tokenizer-out");
  TemporaryFile text{msg(options.tokenizer_out, ".text.tmp.", getpid())};
  {
    std::ofstream out(text.path, std::ios::binary);
    T5S_CHECK(out.good(), "cannot write the tokenizer's training text to '", text.path, "'");
    const size_t max_line =
        static_cast<size_t>(std::max<int64_t>(2, options.tokenizer_training.max_sentence_length_bytes / 2));
    for (size_t i = 0; i < context.inputs.size(); ++i) {
      const InputPlan& input = context.inputs[i];
      if (!all_splits && input.split >= 0 && input.split != train) continue;
      TextRecordReader reader = open_records(context.recipe, input.path);
      TextRecord record;
      RenderedExample example;
      while (reader.next(&record)) {
        if (render_example(context.recipe, record, &example, nullptr) != RenderOutcome::kOk) continue;
        if (!all_splits && context.split_of(input, record, &example.id) != train) continue;
        if (keep < 1.0) {
          const uint64_t h = split_hash(context.seed ^ kTokenizerSampleSalt, msg(i, ":", record.line_number));
          if (unit_interval(h) >= keep) continue;
        }
        write_training_lines(example.source, max_line, out);
        write_training_lines(example.target, max_line, out);
      }
    }
    out.close();
    T5S_CHECK(out.good(), "error while writing '", text.path, "'");
  }
  T5S_CHECK(file_size_or_zero(text.path) > 0, "no text to train the tokenizer on: the ",
            all_splits ? "inputs hold" : "train split holds", " no usable record");
  TokenizerTrainOptions training = options.tokenizer_training;
  training.user_symbols = context.recipe.special_tokens;
  // train_tokenizer writes <prefix>.model and <prefix>.vocab: both under a temporary prefix, renamed when done.
  const std::string final_prefix = options.tokenizer_out.substr(0, options.tokenizer_out.size() - suffix.size());
  const std::string temporary_prefix = msg(final_prefix, ".tmp.", getpid());
  TemporaryFile temporary_model{temporary_prefix + ".model"}, temporary_vocab{temporary_prefix + ".vocab"};
  train_tokenizer(text.path, temporary_model.path, training);
  std::filesystem::rename(temporary_model.path, options.tokenizer_out);
  std::filesystem::rename(temporary_vocab.path, final_prefix + ".vocab");
}

// ---- The streaming pass ----

struct TokenizedRecord {
  int split = 0;
  std::vector<int32_t> source, target;
  bool source_truncated = false, target_truncated = false;
};

struct Batch {
  int64_t sequence = 0;
  size_t input = 0;
  std::vector<TextRecord> records;
  SkipCounts reader_skips;    // lines the reader passed over (malformed, not UTF-8) while reading this batch
  int64_t bytes = 0;          // input bytes this batch stands for
  int64_t record_count = 0;   // records read, the reader's skips included
  std::string first_problem;  // "<file>:<line>: <why>" of the first record skipped by the recipe
  // Filled by a worker.
  std::vector<TokenizedRecord> examples;
  std::vector<SkipCounts> skips;  // per split
};

void count_skip(RenderOutcome outcome, SkipCounts* skips) {
  switch (outcome) {
    case RenderOutcome::kMissingField:
      ++skips->missing_field;
      break;
    case RenderOutcome::kEmptyTarget:
      ++skips->empty_target;
      break;
    case RenderOutcome::kInvalidUtf8:
      ++skips->invalid_utf8;
      break;
    case RenderOutcome::kUnknownLabel:
      ++skips->unknown_label;
      break;
    case RenderOutcome::kOk:
      break;
  }
}

// Progress on stderr: a bar redrawn in place on a terminal, else a line every `every_s` seconds.
class Progress {
 public:
  Progress(std::ostream& out, ProgressStyle style, double every_s, int64_t total_bytes)
      : out_(out), every_s_(every_s), total_bytes_(total_bytes), start_(Clock::now()), last_(start_) {
    bar_ = style == ProgressStyle::kBar || (style == ProgressStyle::kAuto && isatty(STDERR_FILENO));
    none_ = style == ProgressStyle::kNone || (!bar_ && every_s <= 0);
  }

  void update(int64_t bytes, int64_t examples, bool final) {
    if (none_) return;
    const double since_last = std::chrono::duration<double>(Clock::now() - last_).count();
    if (!final && since_last < (bar_ ? 0.25 : every_s_)) return;
    last_ = Clock::now();
    const double elapsed = std::max(1e-9, seconds_since(start_));
    const double rate = bytes / elapsed;
    const double fraction = total_bytes_ > 0 ? std::min(1.0, static_cast<double>(bytes) / total_bytes_) : 0.0;
    std::ostringstream line;
    line << std::fixed << std::setprecision(1);
    if (bar_) {
      const int width = 30;
      const int filled = static_cast<int>(fraction * width);
      line << "\r[" << std::string(filled, '#') << std::string(width - filled, '.') << "] " << std::setw(5)
           << 100 * fraction << "% ";
    } else {
      line << "t5scale-prep: " << bytes / 1e6 << " / " << total_bytes_ / 1e6 << " MB (" << 100 * fraction << "%), ";
    }
    line << rate / 1e6 << " MB/s, " << std::setprecision(0) << examples / elapsed << " examples/s";
    if (rate > 0 && total_bytes_ > bytes) line << ", ETA " << (total_bytes_ - bytes) / rate << " s";
    if (final && !bar_) line << " (done)";
    if (bar_) {
      line << "   ";
      if (final) line << "\n";
    } else {
      line << "\n";
    }
    out_ << line.str() << std::flush;
  }

 private:
  std::ostream& out_;
  double every_s_;
  int64_t total_bytes_;
  Clock::time_point start_, last_;
  bool bar_ = false, none_ = false;
};

class StreamingPass {
 public:
  StreamingPass(const Context& context, const Tokenizer& tokenizer, int threads)
      : context_(context),
        tokenizer_(tokenizer),
        threads_(std::max(1, threads)),
        max_in_flight_(2 * static_cast<int64_t>(std::max(1, threads)) + 2) {}

  // Reads every input and appends its examples to `writer` in input order. Returns bytes read and records.
  void run(TokenizedDatasetWriter& writer, Progress& progress, int64_t* bytes, int64_t* records, int64_t* examples) {
    std::vector<std::thread> threads;
    threads.emplace_back([this] { guarded([this] { read_all(); }); });
    for (int t = 0; t < threads_; ++t) threads.emplace_back([this] { guarded([this] { work(); }); });
    try {
      write_all(writer, progress, bytes, records, examples);
    } catch (...) {
      fail(std::current_exception());
    }
    for (auto& thread : threads) thread.join();
    if (error_) std::rethrow_exception(error_);
    // Records that all fail to render are a recipe that does not fit the data (a misspelt field), not data.
    for (size_t i = 0; i < context_.inputs.size(); ++i) {
      const InputTally& tally = tallies_[i];
      T5S_CHECK(tally.records == 0 || tally.examples > 0, "input '", context_.inputs[i].path, "': none of its ",
                tally.records, " records made an example; the first: ",
                tally.first_problem.empty() ? std::string("malformed (see the skip counts)") : tally.first_problem);
    }
    progress.update(*bytes, *examples, true);
  }

 private:
  template <typename Fn>
  void guarded(Fn&& fn) {
    try {
      fn();
    } catch (...) {
      fail(std::current_exception());
    }
  }

  void fail(std::exception_ptr error) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = error;
    stop_ = true;
    changed_.notify_all();
  }

  // Hands a batch to the workers once a ticket is free; false when the pass is stopping.
  bool submit(std::unique_ptr<Batch> batch) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return stop_ || in_flight_ < max_in_flight_; });
    if (stop_) return false;
    batch->sequence = next_sequence_++;
    ++in_flight_;
    todo_.push_back(std::move(batch));
    changed_.notify_all();
    return true;
  }

  void read_all() {
    for (size_t i = 0; i < context_.inputs.size(); ++i) {
      TextRecordReader reader = open_records(context_.recipe, context_.inputs[i].path);
      const int64_t file_size = reader.file_size_bytes();
      TextReadCounts counted;
      int64_t counted_bytes = 0;
      auto batch = std::make_unique<Batch>();
      batch->input = i;
      bool more = true;
      while (more) {
        TextRecord record;
        more = reader.next(&record);
        if (more) batch->records.push_back(std::move(record));
        // At the end the rest of the file (blank lines after the last record) counts as read.
        const int64_t bytes_now = more ? reader.bytes_read() : std::max(reader.bytes_read(), file_size);
        if (more && batch->records.size() < kBatchRecords && bytes_now - counted_bytes < kBatchBytes) continue;
        const TextReadCounts& counts = reader.counts();
        batch->reader_skips.malformed = counts.skipped_malformed - counted.skipped_malformed;
        batch->reader_skips.invalid_utf8 = counts.skipped_invalid_utf8 - counted.skipped_invalid_utf8;
        batch->bytes = bytes_now - counted_bytes;
        counted = counts;
        counted_bytes = bytes_now;
        if (!batch->records.empty() || batch->reader_skips.total() > 0 || batch->bytes > 0) {
          if (!submit(std::move(batch))) return;
        }
        batch = std::make_unique<Batch>();
        batch->input = i;
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    reading_done_ = true;
    changed_.notify_all();
  }

  void work() {
    while (true) {
      std::unique_ptr<Batch> batch;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return stop_ || !todo_.empty() || reading_done_; });
        if (stop_ || todo_.empty()) return;
        batch = std::move(todo_.front());
        todo_.pop_front();
      }
      tokenize(*batch);
      std::lock_guard<std::mutex> lock(mutex_);
      done_[batch->sequence] = std::move(batch);
      changed_.notify_all();
    }
  }

  void tokenize(Batch& batch) const {
    const InputPlan& input = context_.inputs[batch.input];
    const Recipe& recipe = context_.recipe;
    batch.skips.assign(context_.split_names.size(), SkipCounts{});
    batch.skips[static_cast<size_t>(input.split >= 0 ? input.split : context_.fallback_split)] += batch.reader_skips;
    batch.examples.reserve(batch.records.size());
    RenderedExample rendered;
    std::string problem;
    for (const TextRecord& record : batch.records) {
      const RenderOutcome outcome = render_example(recipe, record, &rendered, &problem);
      if (outcome != RenderOutcome::kOk) {
        // A record without the field or with an empty target is data that has no example (NQ questions without a
        // short answer): always a counted skip. Text that is not UTF-8 and a label the recipe does not map are
        // damage or a recipe mismatch: the policy decides.
        const bool always_skip = outcome == RenderOutcome::kMissingField || outcome == RenderOutcome::kEmptyTarget;
        T5S_CHECK(always_skip || recipe.on_malformed == MalformedPolicy::kSkip, input.path, ":", record.line_number,
                  ": ", problem, " (on_malformed is fail; --on-malformed skip skips and counts such records)");
        if (batch.first_problem.empty()) batch.first_problem = msg(input.path, ":", record.line_number, ": ", problem);
        count_skip(outcome, &batch.skips[static_cast<size_t>(context_.split_of(input, record, nullptr))]);
        continue;
      }
      TokenizedRecord out;
      out.split = context_.split_of(input, record, &rendered.id);
      out.source_truncated = tokenizer_.encode_truncated(rendered.source, context_.max_source_length, &out.source);
      out.target_truncated = tokenizer_.encode_truncated(rendered.target, context_.max_target_length, &out.target);
      batch.examples.push_back(std::move(out));
    }
    batch.record_count = static_cast<int64_t>(batch.records.size()) + batch.reader_skips.total();
    batch.records.clear();
    batch.records.shrink_to_fit();
  }

  void write_all(TokenizedDatasetWriter& writer, Progress& progress, int64_t* bytes, int64_t* records,
                 int64_t* examples) {
    int64_t next = 0;
    while (true) {
      std::unique_ptr<Batch> batch;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait_for(lock, std::chrono::milliseconds(250),
                          [&] { return stop_ || done_.count(next) > 0 || (reading_done_ && next == next_sequence_); });
        if (stop_) return;
        if (reading_done_ && next == next_sequence_) return;
        const auto found = done_.find(next);
        if (found != done_.end()) {
          batch = std::move(found->second);
          done_.erase(found);
        }
      }
      if (batch) {
        for (const TokenizedRecord& example : batch->examples) {
          writer.append(context_.split_names[static_cast<size_t>(example.split)], example.source, example.target,
                        example.source_truncated, example.target_truncated);
        }
        for (size_t s = 0; s < batch->skips.size(); ++s) {
          if (batch->skips[s].total() > 0) writer.add_skips(context_.split_names[s], batch->skips[s]);
        }
        *bytes += batch->bytes;
        *records += batch->record_count;
        InputTally& tally = tallies_[batch->input];
        tally.records += batch->record_count;
        tally.examples += static_cast<int64_t>(batch->examples.size());
        if (tally.first_problem.empty()) tally.first_problem = batch->first_problem;
        *examples += static_cast<int64_t>(batch->examples.size());
        ++next;
        std::lock_guard<std::mutex> lock(mutex_);
        --in_flight_;
        changed_.notify_all();
      }
      progress.update(*bytes, *examples, false);
    }
  }

  struct InputTally {
    int64_t records = 0, examples = 0;
    std::string first_problem;
  };

  const Context& context_;
  const Tokenizer& tokenizer_;
  std::vector<InputTally> tallies_ = std::vector<InputTally>(context_.inputs.size());  // the writer's only
  const int threads_;
  const int64_t max_in_flight_;

  std::mutex mutex_;
  std::condition_variable changed_;  // any change of the state below
  std::deque<std::unique_ptr<Batch>> todo_;
  std::map<int64_t, std::unique_ptr<Batch>> done_;
  int64_t in_flight_ = 0;
  int64_t next_sequence_ = 0;
  bool reading_done_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace

const std::map<std::string, double>& default_split_ratios() {
  static const std::map<std::string, double> ratios = {{"test", 0.05}, {"train", 0.9}, {"validation", 0.05}};
  return ratios;
}

uint64_t split_hash(uint64_t seed, std::string_view id) {
  return mix64(fnv1a_64(id) ^ mix64(seed + 0x9e3779b97f4a7c15ULL));
}

std::string hash_split(const std::map<std::string, double>& ratios, uint64_t seed, std::string_view id) {
  T5S_CHECK(!ratios.empty(), "hash split without split ratios");
  const double u = unit_interval(split_hash(seed, id));
  double cumulative = 0;
  for (const auto& [split, ratio] : ratios) {
    cumulative += ratio;
    if (u < cumulative) return split;
  }
  return ratios.rbegin()->first;  // u lies in the rounding gap below 1
}

// Truncation that cuts much of a side is said; truncation that cuts every example's target (or source) empties the
// task (a classifier whose labels are all cut learns their first pieces) and is refused, naming the key that set the
// limit, before the dataset is written. Over all splits together.
std::vector<std::string> check_truncation(const std::vector<PrepSplitResult>& splits, const Context& context,
                                          const PrepOptions& options) {
  int64_t examples = 0, cut_sources = 0, cut_targets = 0;
  for (const PrepSplitResult& split : splits) {
    examples += split.statistics.num_examples;
    cut_sources += split.statistics.truncated_sources;
    cut_targets += split.statistics.truncated_targets;
  }
  std::vector<std::string> warnings;
  auto check_side = [&](const char* side, int64_t cut, int64_t limit, bool from_flag) {
    const std::string key = from_flag ? msg("--max-", side, "-length ", limit)
                                      : msg("recipe ", options.recipe_path, ": max_", side, "_length ", limit);
    T5S_CHECK(examples == 0 || cut < examples, key, " cuts every ", side, " (", cut, " of ", examples,
              " examples): the data would no longer hold the task. Raise it (0 = no limit), or check the recipe's ",
              side, " template");
    if (examples > 0 && 10 * cut > examples) {
      warnings.push_back(msg(key, " cuts ", cut, " of ", examples, " ", side, "s (", (100 * cut + examples / 2) / examples,
                             "%): check that the cut part is not what the model must learn"));
    }
  };
  check_side("source", cut_sources, context.max_source_length, options.max_source_length.has_value());
  check_side("target", cut_targets, context.max_target_length, options.max_target_length.has_value());
  return warnings;
}

PrepResult run_prep(const PrepOptions& options, std::ostream& progress_stream) {
  T5S_CHECK(!options.out_path.empty(), "--out is required");
  T5S_CHECK(options.threads >= 1, "--threads must be >= 1, got ", options.threads);
  T5S_CHECK(options.train_tokenizer != !options.tokenizer_path.empty(),
            "give --tokenizer FILE.model or --train-tokenizer (with --tokenizer-out FILE.model), exactly one");
  PrepResult result;
  result.out_path = options.out_path;
  result.threads = options.threads;
  const Context context = make_context(options, &result.split_rule);

  if (options.train_tokenizer) {
    const auto start = Clock::now();
    train_tokenizer_for(context, options);
    result.tokenizer_training_s = seconds_since(start);
  }
  const std::string tokenizer_file = options.train_tokenizer ? options.tokenizer_out : options.tokenizer_path;
  const Tokenizer tokenizer = Tokenizer::load(tokenizer_file, context.recipe.special_tokens);
  result.tokenizer_file = tokenizer_file;
  result.tokenizer_sha256 = tokenizer.sha256();
  result.vocab_size = tokenizer.vocab_size();
  result.added_tokens = tokenizer.added_tokens();

  TokenizedDatasetInfo info;
  info.tokenizer_sha256 = tokenizer.sha256();
  info.tokenizer_file = tokenizer_file;
  info.vocab_size = tokenizer.vocab_size();
  info.added_tokens = tokenizer.added_tokens();
  info.recipe_name = context.recipe.name;
  info.recipe_yaml = context.recipe.yaml_text;
  info.max_source_length = context.max_source_length;
  info.max_target_length = context.max_target_length;
  info.created_by = options.created_by;
  int64_t total_bytes = 0;
  for (const InputPlan& input : context.inputs) {
    if (!info.input_files.empty()) info.input_files += ",";
    info.input_files +=
        input.split >= 0 ? context.split_names[static_cast<size_t>(input.split)] + "=" + input.path : input.path;
    total_bytes += file_size_or_zero(input.path);
  }

  create_parent_folder(options.out_path, "--out");
  TokenizedDatasetWriter writer(options.out_path, info);
  for (const std::string& split : context.split_names) writer.add_split(split);
  Progress progress(progress_stream, options.progress, options.log_every_s, total_bytes);
  const auto start = Clock::now();
  StreamingPass(context, tokenizer, options.threads)
      .run(writer, progress, &result.input_bytes, &result.records, &result.examples);
  for (const std::string& split : context.split_names) result.splits.push_back({split, writer.statistics(split)});
  result.warnings = check_truncation(result.splits, context, options);  // throws before the file is written
  writer.finish();
  result.tokenize_s = seconds_since(start);
  return result;
}

}  // namespace t5scale
