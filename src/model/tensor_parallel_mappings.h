// The four region mappings of Megatron-style tensor parallelism, as autograd functions whose names say what
// forward and backward do. Each returns its input untouched when the group has one rank, so TP=1 runs the
// same code. The communicator must outlive every graph built through these functions.
#pragma once

#include <torch/torch.h>

#include "dist/communicator.h"

namespace t5scale {

// forward: identity; backward: all-reduce (sum) of the gradient. Entry to a column-parallel region.
torch::Tensor copy_to_tensor_parallel_region(const torch::Tensor& input, Communicator& tp);
// forward: all-reduce (sum); backward: identity. Exit from a row-parallel region.
torch::Tensor reduce_from_tensor_parallel_region(const torch::Tensor& input, Communicator& tp);
// forward: keep this rank's slice of the last dimension; backward: all-gather along the last dimension.
torch::Tensor scatter_to_tensor_parallel_region(const torch::Tensor& input, Communicator& tp);
// forward: all-gather along the last dimension; backward: keep this rank's slice.
torch::Tensor gather_from_tensor_parallel_region(const torch::Tensor& input, Communicator& tp);

// Sequence parallelism (Megatron's): outside the TP regions (norms, dropout, residual adds) each rank holds 1 / tp of
// the micro-batch's tokens instead of all of them. The (B, T, C) activation, read as its B x T tokens in order, is cut
// into tp equal runs of consecutive tokens; rank r holds run r, shaped (B, T / tp, C). Every operation there is
// token by token, so which tokens a rank holds does not matter, only that the cuts agree; cutting the contiguous
// tensor this way makes the gather and the reduce-scatter copy-free. T must be divisible by tp.
enum class SequenceLayout {
  kReplicated,  // every TP rank holds the whole (B, T, C)
  kSplit,       // rank r holds tokens r * B T / tp .. (r + 1) * B T / tp - 1, as (B, T / tp, C)
};

// forward: all-gather the split tokens into (B, T, C); backward: reduce-scatter (sum) of the gradient back to the
// split. The entry to a column-parallel region under sequence parallelism (in place of copy_to_tensor_parallel_region).
torch::Tensor gather_from_sequence_parallel_region(const torch::Tensor& split, Communicator& tp);
// forward: reduce-scatter (sum) of (B, T, C) into this rank's split; backward: all-gather of the gradient. The exit
// from a row-parallel region under sequence parallelism (in place of reduce_from_tensor_parallel_region).
torch::Tensor reduce_scatter_to_sequence_parallel_region(const torch::Tensor& full, Communicator& tp);

// Helpers the mappings and the layers share.
torch::Tensor split_last_dim(const torch::Tensor& input, Communicator& tp);   // this rank's slice
torch::Tensor gather_last_dim(const torch::Tensor& input, Communicator& tp);  // concatenated in rank order
torch::Tensor gather_sequence(const torch::Tensor& split, Communicator& tp);          // (B, T / tp, C) -> (B, T, C)
torch::Tensor reduce_scatter_sequence(const torch::Tensor& full, Communicator& tp);  // (B, T, C) -> (B, T / tp, C)

}  // namespace t5scale
