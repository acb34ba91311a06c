// Activation checkpointing of one T5 block: forward runs without keeping the block's activations; backward
// recomputes the block from its saved inputs, with the RNG states it had in forward restored, so dropout masks
// repeat and the gradients equal those of the plain block. Selective recomputation does the same for one attention
// core (Megatron's selective mode): the scores, softmax, dropout mask and probabilities, the largest activations of a
// block and the cheapest to make again.
#pragma once

#include <torch/torch.h>

#include "model/parallel_rng.h"
#include "model/t5_layers.h"

namespace t5scale {

// The maskings (AttentionMasking) are kept with the RNG states and given to the recomputed block as to the first.
torch::Tensor checkpointed_block_forward(T5BlockImpl& block, ParallelRng& rng, const torch::Tensor& hidden,
                                         const torch::Tensor& self_bias, const torch::Tensor& encoder_output,
                                         const torch::Tensor& cross_bias, SequenceLayout layout,
                                         const AttentionMasking& self_masking = {},
                                         const AttentionMasking& cross_masking = {});

// attention.core_kept(query, key, value, bias) keeping only its inputs; backward recomputes it with the forward's RNG
// states and returns the gradients of query, key, value and bias.
torch::Tensor recomputed_attention_core(T5AttentionImpl& attention, const torch::Tensor& query,
                                        const torch::Tensor& key, const torch::Tensor& value,
                                        const torch::Tensor& bias, const AttentionMasking& masking = {});

}  // namespace t5scale
