// Activation checkpointing of one T5 block: forward runs without keeping the block's activations; backward
// recomputes the block from its saved inputs, with the RNG states it had in forward restored, so dropout masks
// repeat and the gradients equal those of the plain block.
#pragma once

#include <torch/torch.h>

#include "model/parallel_rng.h"
#include "model/t5_layers.h"

namespace t5scale {

torch::Tensor checkpointed_block_forward(T5BlockImpl& block, ParallelRng& rng, const torch::Tensor& hidden,
                                         const torch::Tensor& self_bias, const torch::Tensor& encoder_output,
                                         const torch::Tensor& cross_bias, SequenceLayout layout);

}  // namespace t5scale
