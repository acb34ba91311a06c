// Inside the CUDA backend library only: cuDNN's fused attention (dist/fused_attention.h) as the backend runs it.
#pragma once

#include <ATen/core/Generator.h>

#include <string>

#include "dist/fused_attention.h"

namespace t5scale {

// "" when this library was built with cuDNN's frontend and the cuDNN that LibTorch loaded answers; else why not.
std::string cudnn_attention_unavailable();
FusedAttentionForwardResult cudnn_attention_forward(const FusedAttentionInputs& in, at::Generator generator,
                                                    bool with_backward, bool bias_gradient);
FusedAttentionGradients cudnn_attention_backward(const FusedAttentionInputs& in, const FusedAttentionForwardResult& fwd,
                                                 const torch::Tensor& grad_output, bool bias_gradient);

}  // namespace t5scale
