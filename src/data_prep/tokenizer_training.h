// Training a SentencePiece unigram tokenizer with T5's special ids, for t5scale-prep (loading one is
// data/tokenizer.h).
//
//   TokenizerTrainOptions options;
//   options.vocab_size = 8000;
//   train_tokenizer("sentences.txt", "spm.model", options);   // also writes spm.vocab
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace t5scale {

struct TokenizerTrainOptions {
  int64_t vocab_size = 32000;                // pieces of the model (N); the sentinels come on top, as in T5
  double character_coverage = 0.9995;        // SentencePiece's default for languages with a small alphabet
  std::vector<std::string> user_symbols;     // always one piece each (user_defined_symbols)
  int64_t input_sentence_size = 5000000;     // lines SentencePiece samples from a larger input (bounds its memory)
  int64_t max_sentence_length_bytes = 8192;  // longer lines are skipped by SentencePiece: split them first
  uint32_t seed = 1234;  // SentencePiece's sampling and shuffling
};

// SentencePiece sums each EM step's expectations per thread: another thread count gives other scores in the
// last bits. Training always uses this many threads, on any machine, so that a tokenizer is reproducible.
inline constexpr int kTokenizerTrainingThreads = 4;

// Trains a unigram model with T5's special ids (pad 0, eos 1, unk 2, no bos) on a text file (one sentence a line)
// and writes it to `model_path` (which must end in ".model") and the pieces with their scores to the ".vocab"
// beside it. The same text and options give the same bytes: the model records no file name, process or thread
// setting of the machine. SentencePiece's log is kept quiet.
void train_tokenizer(const std::string& text_path, const std::string& model_path, const TokenizerTrainOptions& options);

}  // namespace t5scale
