// t5scale-prep's work: JSONL/CSV records through a recipe and the tokenizer into a tokenized dataset file, as a
// stream whose memory does not grow with the input.
//
//   reader thread ──batches──▶ worker pool (render + tokenize) ──▶ ordered writer (this thread) ──▶ HDF5
//
// The reader cuts the input into batches (1024 records or 512 KiB of input, whichever comes first); at most
// 2 * threads + 2 batches exist at any time (read, queued, being tokenized or waiting for their turn), a ticket
// taken by the reader and returned by the writer. The writer appends batches in input order, so the file is the
// same, byte for byte, for any number of threads. Memory bound: (2T + 2) batches (each about 3x its input bytes
// as parsed JSON, rendered text and tokens; one record larger than 512 KiB makes a batch of its own) plus the
// writer's buffers (up to 1 Mi tokens and 1 Mi offsets per sequence kind, 12 MiB per split) plus, when training a
// tokenizer, SentencePiece's sample (tokenizer.input_sentence_size lines).
//
// Splits: one input file per split (--input-split NAME=FILE or the recipe's split_files), or a seeded 64-bit hash
// of each record's id (the recipe's id_field, else its line number) into the split ratios, so that a record
// keeps its split as the file grows.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "data/tokenized_dataset.h"
#include "data/tokenizer.h"
#include "data_prep/text_records.h"
#include "data_prep/tokenizer_training.h"

namespace t5scale {

// Default hash split when neither the recipe nor the command line gives one.
const std::map<std::string, double>& default_split_ratios();  // train .9, validation .05, test .05

// The split that a record with this id goes to: h = splitmix64 finaliser of FNV-1a(id) mixed with the seed,
// u = top 53 bits of h / 2^53 in [0, 1), the first split (by name) whose cumulative ratio exceeds u.
uint64_t split_hash(uint64_t seed, std::string_view id);
std::string hash_split(const std::map<std::string, double>& ratios, uint64_t seed, std::string_view id);

enum class ProgressStyle { kAuto, kBar, kLines, kNone };  // kAuto: a bar when stderr is a terminal, else lines

struct PrepOptions {
  std::string recipe_path;
  std::vector<std::string> inputs;                                // hash-split inputs (--input), in order
  std::vector<std::pair<std::string, std::string>> input_splits;  // (split, file) from --input-split
  std::map<std::string, double> split_ratios;                     // --split-ratio; empty = the recipe's or default
  std::string data_dir;  // --data-dir: the recipe's relative split_files are read from here, not the recipe's folder
  std::string out_path;

  std::string tokenizer_path;  // a given .model (--tokenizer)
  bool train_tokenizer = false;
  std::string tokenizer_out;  // where the trained model goes (must end in .model)
  TokenizerTrainOptions tokenizer_training;
  int64_t tokenizer_text_max_bytes = int64_t{512} << 20;  // the training text is sampled down to about this

  std::optional<int64_t> max_source_length, max_target_length;  // override the recipe (0 = no limit)
  std::optional<int64_t> split_seed;                            // overrides the recipe's
  std::optional<MalformedPolicy> on_malformed;                  // overrides the recipe's
  int threads = 1;                                              // tokenizer workers
  double log_every_s = 10;                                      // progress lines (not on a terminal); <= 0: none
  ProgressStyle progress = ProgressStyle::kAuto;
  std::string created_by = "t5scale-prep";
};

struct PrepSplitResult {
  std::string name;
  SplitStatistics statistics;
};

struct PrepResult {
  std::string out_path;
  std::string tokenizer_file, tokenizer_sha256;
  int64_t vocab_size = 0;
  std::vector<std::string> added_tokens;
  std::vector<PrepSplitResult> splits;  // in the file's split order
  std::string split_rule;               // how the splits were made, for the report
  int64_t input_bytes = 0;              // bytes read in the tokenizing pass
  int64_t records = 0;                  // records read (kept or skipped after reading)
  int64_t examples = 0;                 // examples written
  double tokenizer_training_s = 0;      // first pass and SentencePiece training (0 with a given model)
  double tokenize_s = 0;                // the tokenizing pass
  int threads = 1;
  std::vector<std::string> warnings;    // truncation that cuts more than a tenth of the sources or targets
  double megabytes_per_s() const { return tokenize_s > 0 ? input_bytes / 1e6 / tokenize_s : 0; }
  double examples_per_s() const { return tokenize_s > 0 ? examples / tokenize_s : 0; }
};

// Runs the whole preparation; bad input throws t5scale::Error naming the file, line or key. Progress goes to
// `progress_stream` (stderr in the program).
PrepResult run_prep(const PrepOptions& options, std::ostream& progress_stream);

}  // namespace t5scale
