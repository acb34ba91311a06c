// The built-in synthetic task as tokenized examples, without LibTorch: what `t5scale-prep synthetic` writes and what
// the trainer uses in memory for data.dataset: synthetic (tests/support/synthetic_task.h draws the same task from
// LibTorch's generator for the training tests, whose reference figures depend on its stream). The target is the source
// with every token shifted by one inside the alphabet 3..vocab_size-1, wrapping from the last word to the first ("3 9
// 63" -> "4 10 3" for vocab 64). Both sequences end with eos, as in any tokenized dataset. Deterministic for a seed on
// every platform (its own integer generator, no std:: distributions).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/token_sequences.h"

namespace t5scale {

struct SyntheticExamplesOptions {
  int64_t vocab_size = 64;  // ids 0..2 are pad, eos, unk as in T5; the alphabet is 3..vocab_size-1
  int64_t min_length = 3;   // words per source, eos not counted
  int64_t max_length = 8;
  uint64_t seed = 1234;
};

// The word that follows `id` in the task's alphabet.
int32_t synthetic_next_word(int32_t id, int64_t vocab_size);

class SyntheticExampleGenerator {
 public:
  explicit SyntheticExampleGenerator(const SyntheticExamplesOptions& options);
  TokenSequences next();

 private:
  uint64_t below(uint64_t bound);  // uniform in [0, bound)
  SyntheticExamplesOptions options_;
  uint64_t state_;
};

struct SyntheticDatasetOptions {
  SyntheticExamplesOptions task;
  int64_t train_examples = 4096;
  int64_t validation_examples = 512;
};

// One split of the synthetic dataset ("train" or "validation"), exactly the examples write_synthetic_dataset
// writes for it: what the trainer uses in memory when data.dataset is "synthetic".
std::vector<TokenSequences> synthetic_split(const SyntheticDatasetOptions& options, const std::string& split);

// Writes the task's train and validation splits (independent streams of the seed) as a tokenized dataset with
// tokenizer_sha256 "synthetic-vocab<V>" and vocab_size V.
void write_synthetic_dataset(const std::string& path, const SyntheticDatasetOptions& options,
                             const std::string& created_by);

}  // namespace t5scale
