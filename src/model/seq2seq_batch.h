// The tensors of one sequence-to-sequence batch: what data's collation produces and the model consumes.
#pragma once

#include <torch/torch.h>

namespace t5scale {

struct Seq2SeqBatch {
  torch::Tensor input_ids;       // (B, S) int64
  torch::Tensor attention_mask;  // (B, S) 1 for tokens, 0 for padding
  torch::Tensor labels;          // (B, T) int64, kIgnoreIndex (-100) on padding
};

}  // namespace t5scale
