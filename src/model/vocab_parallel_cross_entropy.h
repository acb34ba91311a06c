// Softmax cross-entropy over logits split by vocabulary across the TP group, without ever gathering the full
// logits (Megatron-LM's algorithm): an all-reduce of the row maximum, of the target logit and of the sum of
// exponentials. With one rank it is ordinary cross-entropy. Computed in fp32 whatever the logits' dtype.
#pragma once

#include <torch/torch.h>

#include "core/ignore_index.h"
#include "dist/communicator.h"

namespace t5scale {

// local_logits (..., V / tp) holding token ids [vocab_start, vocab_start + V / tp); labels (...) global ids.
// Returns the per-token loss (...) in fp32 (fp64 for fp64 logits), zero where the label is kIgnoreIndex.
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& local_logits, const torch::Tensor& labels,
                                           int64_t vocab_start, Communicator& tp);

// The index of the largest logit over the whole vocabulary, from vocabulary-split logits (..., V / tp); ties
// go to the lowest token id, as torch::argmax does on full logits.
torch::Tensor vocab_parallel_argmax(const torch::Tensor& local_logits, int64_t vocab_start, Communicator& tp);

// log_softmax over the whole vocabulary of vocabulary-split logits (..., V / tp): this rank's slice of it, from
// an all-reduce of the row maximum and of the sum of exponentials. With one rank it is torch::log_softmax itself.
torch::Tensor vocab_parallel_log_softmax(const torch::Tensor& local_logits, Communicator& tp);

// The k largest values over the whole vocabulary of vocabulary-split scores (..., V / tp), in descending order,
// with their token ids: each rank's own k largest are gathered and the k largest of those kept. (values, ids),
// each (..., k). k must not exceed V.
std::tuple<torch::Tensor, torch::Tensor> vocab_parallel_topk(const torch::Tensor& local_scores, int64_t k,
                                                             int64_t vocab_start, Communicator& tp);

}  // namespace t5scale
