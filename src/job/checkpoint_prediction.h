// t5scale-ckpt predict: a checkpoint's model run on a file of new inputs, one output line per input line (what
// Hugging Face's Trainer.predict gives for a test set without labels). One process, the whole model in fp32 on the
// CPU, greedy decoding or beam search (T5ModelImpl::generate_greedy, generate_beam).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "io/sharded_checkpoint.h"
#include "model/t5_model.h"

namespace t5scale {

struct PredictionSettings {
  int64_t num_beams = 1;          // 1: greedy decoding
  double length_penalty = 1.0;    // beam search: a finished hypothesis scores sum of log-probs / length ** this
  int64_t max_new_tokens = 64;    // generated tokens per input at most, eos included
  int64_t batch_size = 16;        // inputs per generate call
  int64_t max_source_length = 0;  // tokens an input is cut to, eos kept (0: no limit)
  // Called after each batch with the inputs done and their total.
  std::function<void(int64_t done, int64_t total)> on_batch;
};

struct Predictions {
  std::vector<std::string> lines;  // one per input, in input order, without newlines
  int64_t generated = 0;           // inputs the model ran on (the others had no text)
  int64_t cut = 0;                 // inputs cut to max_source_length
};

// Each input's generation decoded to text, newlines inside it replaced by spaces. An input with no text (empty or
// blank) gives an empty line without running the model. Inputs are encoded as t5scale-prep encodes a source (its
// tokenizer, eos appended), taken in order of length for batches with little padding, each batch padded to its
// longest; the outputs are in input order. A row's generation does not depend on the rows beside it (padding is
// masked): the outputs are the same for any batch_size, up to fp32 rounding of sums over other padded lengths.
Predictions predict_texts(T5ModelImpl& model, const Tokenizer& tokenizer, const std::vector<std::string>& inputs,
                          const PredictionSettings& settings);

// The lines of a text file: split at '\n', a final '\r' of a line dropped (CRLF files), no line after a final
// newline. Error naming the file when it cannot be read.
std::vector<std::string> read_input_lines(const std::string& path);

struct PredictOptions {
  std::string input;      // one input per line
  std::string out;        // written whole (under a temporary name, then renamed)
  std::string tokenizer;  // "" = the run's (find_run_tokenizer)
  int64_t num_beams = 1;
  double length_penalty = 1.0;
  int64_t max_new_tokens = 0;  // 0: the run's eval.max_new_tokens
  int64_t batch_size = 16;
  std::function<void(const std::string&)> progress;  // a line of progress, at most every 10 s
};

struct PredictResult {
  int64_t lines = 0, generated = 0, cut = 0;
  int64_t max_new_tokens = 0, max_source_length = 0;
  std::string tokenizer;     // where it came from
  std::string prefix_note;   // where inputs lack the run's source prefix: what it is; "" otherwise
  double seconds = 0.0;      // generation time
};

// Reads `input`, finds the tokenizer and builds the model (checkpoint_model), generates (predict_texts, inputs cut to
// the run's data.max_source_length) and writes `out`. Refuses before building the model: an input file that cannot
// be read, --out naming the input, a run without a tokenizer (naming --tokenizer), a tokenizer with more ids than the
// model has rows, and settings out of range. Inputs are taken as the whole source text: the run's recipe put a
// prefix such as "summarize: " before every source, and predict adds none; where the recipe has such a prefix and
// some inputs lack it, prefix_note says so.
PredictResult predict_checkpoint(const OpenedCheckpoint& checkpoint, const PredictOptions& options);

}  // namespace t5scale
