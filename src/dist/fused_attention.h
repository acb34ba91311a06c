// cuDNN's fused flash attention for T5 (the graph API's SDPA, forward and backward; dist/cudnn_attention.cpp in the
// CUDA backend): what it takes, the key of its graph cache, and the call the model hands the backend.
//
// T5's attention as cuDNN computes it: softmax(q k^T + bias) v, unscaled (attention scale 1), with
//   - the relative-position bias as one (1, H, Sq, Skv) tensor broadcast over the batch, its gradient (dbias) summed
//     over the batch by cuDNN in backward;
//   - the decoder's causal mask as cuDNN's top-left diagonal (query i attends keys 0..i), not as a bias;
//   - padding as each row's key length (the first n keys are tokens, the rest padding, as the collation pads on the
//     right), not folded into a per-row bias;
//   - dropout on the probabilities drawn by cuDNN's Philox generator from a seed and offset taken from the caller's
//     generator (the TP stream): the same seed and offset give the same mask, so backward and a recomputed block
//     repeat it. The rate is T5's: cuDNN keeps each probability with probability 1 - p and scales by 1 / (1 - p);
//     the masks differ from those of the other kernels (as the SDPA kernels' differ from each other).
// Everything here is plain C++: the rules and keys are held by CPU tests; only the backend runs them.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>

namespace t5scale {

enum class AttentionDtype { kFp16, kBf16, kFp32, kOther };
AttentionDtype attention_dtype(torch::ScalarType dtype);
const char* attention_dtype_name(AttentionDtype dtype);  // "fp16", "bf16", "fp32", "other"

// One attention call as cuDNN's SDPA graph sees it: q (B, H, Sq, D), k and v (B, H, Skv, D).
struct FusedAttentionShape {
  int64_t batch = 0, heads = 0, query_length = 0, key_length = 0, head_dim = 0;
  AttentionDtype dtype = AttentionDtype::kOther;
  bool bias = false;           // an additive bias of shape (1, H, Sq, Skv)
  bool bias_per_row = false;   // a bias of another shape (an additive padding mask (B, 1, 1, Skv)): not taken
  bool causal = false;         // query i attends keys 0..i
  bool padded = false;         // per-row key lengths (B)
  double dropout = 0.0;        // on the probabilities; 0 outside training
  int compute_capability_major = 0;  // 0: not known (the rules of the device are then not applied)
};

// Why cuDNN's fused attention does not take `shape` ("" when it does), in words for the log and the run file:
// "fp32 (cuDNN's fused attention takes fp16 and bf16)". The rules are those of cuDNN 9.19's frontend 1.32 for the
// graphs dist/cudnn_attention.cpp builds (sdpa_support_surface.h), narrowed to what t5scale tests: sm80 or newer;
// fp16 or bf16; a head dim that is a multiple of 8 and at most 128 (T5's are 64 and 128); dropout below 1. Lengths
// need no rounding on sm80 and newer with cuDNN 9.5+: the engines mask the last tile, and dbias takes any lengths and
// padding. A graph that cuDNN still refuses when it is built is refused at run time, with cuDNN's message.
std::string fused_attention_refusal(const FusedAttentionShape& shape);

// What changes a cuDNN graph: every dimension and stride of the tensors it is built for, the dtype, the options, and
// the device. Two calls with equal keys run one graph (built once, cached per thread's backend).
struct FusedAttentionGraphKey {
  bool backward = false;
  bool bias_gradient = false;  // backward: dbias returned
  int device = 0;
  FusedAttentionShape shape;
  int64_t q_strides[4] = {}, k_strides[4] = {}, v_strides[4] = {}, o_strides[4] = {};
  bool operator==(const FusedAttentionGraphKey& other) const;
  std::string text() const;  // for the log: "forward bf16 B=64 H=32 Sq=147 Skv=147 D=128 bias causal p=0.1 ..."
};
struct FusedAttentionGraphKeyHash {
  size_t operator()(const FusedAttentionGraphKey& key) const;
};

// The call the model hands the backend.
struct FusedAttentionInputs {
  torch::Tensor query, key, value;  // (B, H, Sq, D), (B, H, Skv, D) x 2
  torch::Tensor bias;               // (1, H, Sq, Skv), contiguous, or undefined
  torch::Tensor key_lengths;        // (B) int32 on the device, or undefined: every key of every row is a token
  bool causal = false;
  double dropout = 0.0;
};
// Its tensors are on one CUDA device; q, k and v in fp16 or bf16 with any strides of a dense last dimension, the bias
// of their dtype. What the forward gives, and what the backward needs of it:
struct FusedAttentionForwardResult {
  torch::Tensor output;  // (B, Sq, H, D) contiguous: transpose(1, 2) is the attention's (B, H, Sq, D)
  torch::Tensor stats;   // (B, H, Sq, 1) fp32: the softmax's log-sum-exp per row, for backward
  int64_t seed = 0, offset = 0;  // the Philox seed and offset its dropout drew with (0, 0 without dropout)
};
struct FusedAttentionGradients {
  torch::Tensor query, key, value;  // as their inputs
  torch::Tensor bias;               // (1, H, Sq, Skv), undefined without a bias or when not asked for
};

}  // namespace t5scale
