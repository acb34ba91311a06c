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

// Helpers the mappings and the layers share.
torch::Tensor split_last_dim(const torch::Tensor& input, Communicator& tp);   // this rank's slice
torch::Tensor gather_last_dim(const torch::Tensor& input, Communicator& tp);  // concatenated in rank order

}  // namespace t5scale
