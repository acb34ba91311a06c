// A built-in sequence-to-sequence task that a tiny T5 learns within a minute on a CPU: the target is the source
// with every token shifted by one inside the task's alphabet ("3 9 4" -> "4 10 5"), then eos. Deterministic
// for a seed. Used by the demo and the end-to-end tests.
#pragma once

#include <torch/torch.h>

#include "model/t5_model.h"

namespace t5scale {

struct SyntheticTaskOptions {
  int64_t vocab_size = 64;  // ids 0..2 are pad, eos, unk as in T5; the alphabet is 3..vocab_size-1
  int64_t min_length = 3;
  int64_t max_length = 8;
  uint64_t seed = 1234;
};

class SyntheticTask {
 public:
  explicit SyntheticTask(SyntheticTaskOptions options);
  // A padded batch: input_ids/attention_mask (B, max source length), labels (B, max target length) with -100
  // after each row's eos.
  Seq2SeqBatch next_batch(int64_t batch_size);
  const SyntheticTaskOptions& options() const { return options_; }

 private:
  SyntheticTaskOptions options_;
  at::Generator generator_;
};

}  // namespace t5scale
