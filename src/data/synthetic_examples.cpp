#include "data/synthetic_examples.h"

#include "core/check.h"
#include "data/tokenized_dataset.h"

namespace t5scale {

namespace {

constexpr int32_t kFirstWordId = 3;  // after pad (0), eos (1), unk (2)
constexpr int32_t kEosId = 1;

// SplitMix64 (Steele, Lea and Flood): a small generator whose output is fixed by its seed everywhere.
uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

int32_t synthetic_next_word(int32_t id, int64_t vocab_size) {
  const int64_t alphabet = vocab_size - kFirstWordId;
  return static_cast<int32_t>((id - kFirstWordId + 1) % alphabet + kFirstWordId);
}

SyntheticExampleGenerator::SyntheticExampleGenerator(const SyntheticExamplesOptions& options)
    : options_(options), state_(options.seed) {
  T5S_CHECK(options.vocab_size > kFirstWordId + 1 && options.vocab_size <= (int64_t{1} << 31),
            "synthetic task: vocab_size ", options.vocab_size, " leaves no alphabet after pad, eos and unk");
  T5S_CHECK(options.min_length >= 1 && options.min_length <= options.max_length,
            "synthetic task: need 1 <= min_length <= max_length, got ", options.min_length, " and ",
            options.max_length);
}

uint64_t SyntheticExampleGenerator::below(uint64_t bound) {
  // Rejection keeps the draw uniform: values past the last whole multiple of `bound` are drawn again.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t value = splitmix64(&state_);
  while (value >= limit) value = splitmix64(&state_);
  return value % bound;
}

TokenSequences SyntheticExampleGenerator::next() {
  const int64_t length =
      options_.min_length +
      static_cast<int64_t>(below(static_cast<uint64_t>(options_.max_length - options_.min_length + 1)));
  const auto alphabet = static_cast<uint64_t>(options_.vocab_size - kFirstWordId);
  TokenSequences example;
  example.source.reserve(static_cast<size_t>(length) + 1);
  example.target.reserve(static_cast<size_t>(length) + 1);
  for (int64_t i = 0; i < length; ++i) {
    const auto word = static_cast<int32_t>(kFirstWordId + below(alphabet));
    example.source.push_back(word);
    example.target.push_back(synthetic_next_word(word, options_.vocab_size));
  }
  example.source.push_back(kEosId);
  example.target.push_back(kEosId);
  return example;
}

void write_synthetic_dataset(const std::string& path, const SyntheticDatasetOptions& options,
                             const std::string& created_by) {
  T5S_CHECK(options.train_examples >= 0 && options.validation_examples >= 0,
            "synthetic dataset: example counts must be >= 0, got ", options.train_examples, " and ",
            options.validation_examples);
  TokenizedDatasetInfo info;
  info.tokenizer_sha256 = msg("synthetic-vocab", options.task.vocab_size);
  info.tokenizer_file = "";
  info.vocab_size = options.task.vocab_size;
  info.recipe_name = "synthetic";
  info.recipe_yaml =
      msg("# t5scale-prep synthetic\nvocab_size: ", options.task.vocab_size, "\nmin_length: ", options.task.min_length,
          "\nmax_length: ", options.task.max_length, "\nseed: ", options.task.seed,
          "\ntrain_examples: ", options.train_examples, "\nvalidation_examples: ", options.validation_examples, "\n");
  info.created_by = created_by;
  TokenizedDatasetWriter writer(path, info);
  for (const char* split : {"train", "validation"}) {
    writer.add_split(split);
    for (const TokenSequences& example : synthetic_split(options, split)) {
      writer.append(split, example.source, example.target);
    }
  }
  writer.finish();
}

std::vector<TokenSequences> synthetic_split(const SyntheticDatasetOptions& options, const std::string& split) {
  T5S_CHECK(split == "train" || split == "validation",
            "the synthetic dataset has the splits train and validation, not '", split, "'");
  const uint64_t stream = split == "train" ? 0 : 1;
  const int64_t count = split == "train" ? options.train_examples : options.validation_examples;
  SyntheticExamplesOptions task = options.task;
  uint64_t seed_state = options.task.seed ^ (0x5eed0000ULL + stream);
  task.seed = splitmix64(&seed_state);  // one independent stream per split
  SyntheticExampleGenerator generator(task);
  std::vector<TokenSequences> examples;
  examples.reserve(static_cast<size_t>(std::max<int64_t>(count, 0)));
  for (int64_t i = 0; i < count; ++i) examples.push_back(generator.next());
  return examples;
}

}  // namespace t5scale
