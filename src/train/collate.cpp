#include "train/collate.h"

#include <algorithm>

#include "core/check.h"
#include "core/ignore_index.h"

namespace t5scale {
namespace {

int64_t round_up(int64_t length, int64_t multiple) {
  if (multiple <= 1) return length;
  return (length + multiple - 1) / multiple * multiple;
}

// Rows of `sequences` copied into a (rows, length) int64 tensor that starts filled with `fill`.
torch::Tensor padded_rows(const std::vector<const std::vector<int32_t>*>& sequences, int64_t length, int64_t fill) {
  const int64_t rows = static_cast<int64_t>(sequences.size());
  torch::Tensor out = torch::full({rows, length}, fill, torch::kInt64);
  int64_t* data = out.data_ptr<int64_t>();
  for (int64_t row = 0; row < rows; ++row) {
    std::copy(sequences[row]->begin(), sequences[row]->end(), data + row * length);
  }
  return out;
}

}  // namespace

Seq2SeqBatch collate(const std::vector<TokenSequences>& examples, const CollateOptions& options) {
  T5S_CHECK(!examples.empty(), "collate: the batch has no examples");
  T5S_CHECK(options.pad_to_multiple_of >= 0, "collate: pad_to_multiple_of must be >= 0, got ",
            options.pad_to_multiple_of);
  T5S_CHECK(options.pad_id >= 0, "collate: pad_id must be >= 0, got ", options.pad_id);

  std::vector<const std::vector<int32_t>*> sources, targets;
  int64_t max_source = 0, max_target = 0;
  for (size_t row = 0; row < examples.size(); ++row) {
    const TokenSequences& example = examples[row];
    T5S_CHECK(!example.source.empty(), "collate: example at row ", row, " of the batch has an empty source");
    T5S_CHECK(!example.target.empty(), "collate: example at row ", row, " of the batch has an empty target");
    for (const auto* sequence : {&example.source, &example.target}) {
      const auto negative = std::find_if(sequence->begin(), sequence->end(), [](int32_t id) { return id < 0; });
      T5S_CHECK(negative == sequence->end(), "collate: example at row ", row, " of the batch has a negative token id ",
                negative == sequence->end() ? 0 : *negative, " in its ",
                sequence == &example.source ? "source" : "target");
    }
    sources.push_back(&example.source);
    targets.push_back(&example.target);
    max_source = std::max<int64_t>(max_source, static_cast<int64_t>(example.source.size()));
    max_target = std::max<int64_t>(max_target, static_cast<int64_t>(example.target.size()));
  }
  const int64_t source_length = round_up(max_source, options.pad_to_multiple_of);
  const int64_t target_length = round_up(max_target, options.pad_to_multiple_of);

  Seq2SeqBatch batch;
  batch.input_ids = padded_rows(sources, source_length, options.pad_id);
  batch.labels = padded_rows(targets, target_length, kIgnoreIndex);
  // The mask from the lengths, not from input_ids != pad: a pad id inside a sequence is still a token.
  batch.attention_mask = torch::zeros({static_cast<int64_t>(examples.size()), source_length}, torch::kInt64);
  int64_t* mask = batch.attention_mask.data_ptr<int64_t>();
  for (size_t row = 0; row < examples.size(); ++row) {
    std::fill(mask + row * source_length, mask + row * source_length + sources[row]->size(), int64_t{1});
  }
  return batch;
}

Seq2SeqBatch pinned(const Seq2SeqBatch& batch) {
  return {batch.input_ids.pin_memory(), batch.attention_mask.pin_memory(), batch.labels.pin_memory()};
}

}  // namespace t5scale
