#include "support/synthetic_task.h"

#include <ATen/CPUGeneratorImpl.h>

#include "core/check.h"
#include "core/ignore_index.h"

namespace t5scale {

namespace {
constexpr int64_t kFirstWordId = 3;  // after pad (0), eos (1), unk (2)
}

SyntheticTask::SyntheticTask(SyntheticTaskOptions options)
    : options_(options), generator_(at::make_generator<at::CPUGeneratorImpl>(options.seed)) {
  T5S_CHECK(options_.vocab_size > kFirstWordId + 1, "synthetic task: vocab_size ", options_.vocab_size,
            " leaves no alphabet after pad, eos and unk");
  T5S_CHECK(options_.min_length >= 1 && options_.min_length <= options_.max_length,
            "synthetic task: need 1 <= min_length <= max_length, got ", options_.min_length, " and ",
            options_.max_length);
}

Seq2SeqBatch SyntheticTask::next_batch(int64_t batch_size) {
  const int64_t alphabet = options_.vocab_size - kFirstWordId;
  const torch::Tensor lengths = at::randint(options_.min_length, options_.max_length + 1, {batch_size}, generator_);
  const int64_t longest = lengths.max().item<int64_t>();
  const torch::Tensor words = at::randint(0, alphabet, {batch_size, longest}, generator_);
  const torch::Tensor positions = torch::arange(longest).unsqueeze(0);
  const torch::Tensor valid = positions < lengths.unsqueeze(1);  // (B, L)

  Seq2SeqBatch batch;
  batch.input_ids = (words + kFirstWordId).masked_fill(~valid, 0);
  batch.attention_mask = valid.to(torch::kLong);
  const torch::Tensor shifted = (words + 1) % alphabet + kFirstWordId;
  torch::Tensor labels = torch::full({batch_size, longest + 1}, kIgnoreIndex, torch::kLong);
  labels.narrow(1, 0, longest).copy_(shifted.masked_fill(~valid, kIgnoreIndex));
  labels.scatter_(1, lengths.unsqueeze(1), 1);  // eos right after each row's last token
  batch.labels = labels;
  return batch;
}

}  // namespace t5scale
