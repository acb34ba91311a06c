// The pieces of a T5 block, each tensor-parallel through the layers of parallel_layers.h: attention heads and
// feed-forward columns are split across the TP group, the relative-position bias table by head.
// Shapes: B batch, T query length, S key length, C d_model, H heads, Hl = H / tp heads on this rank, D d_kv.
// Under sequence parallelism (SequenceLayout::kSplit) the residual stream between the TP regions is this rank's
// (B, T / tp, C) run of tokens; the norms, dropouts and residual adds work on it, and the attention and feed-forward
// gather it on entry and reduce-scatter their output on exit.
#pragma once

#include <torch/torch.h>

#include <set>
#include <string>

#include "config/model_config.h"
#include "dist/communicator.h"
#include "model/parallel_layers.h"
#include "model/parallel_rng.h"

namespace t5scale {

// T5's layer norm: scale only, no mean subtraction, no bias; the variance is accumulated in fp32.
class RMSNormImpl : public torch::nn::Cloneable<RMSNormImpl>, public ShardedModule {
 public:
  RMSNormImpl(int64_t dim, double eps, CommunicatorPtr tp, torch::TensorOptions param_options);
  void reset() override;
  // hidden (..., C). With input kSplit each TP rank normalises its own tokens, so the weight's gradient is a part per
  // rank: summed over the TP group in this norm's backward, or (sum_weight_grad_over_tp false) left as this rank's
  // part for a caller that sums every norm's at once (ParallelTrainer: one all-reduce per step, as Megatron's
  // all-reduce of sequence-parallel norm gradients after backward).
  torch::Tensor forward(const torch::Tensor& hidden, SequenceLayout input = SequenceLayout::kReplicated);
  std::vector<ParameterLayout> parameter_layouts() const override;

  int64_t dim;
  double eps;
  CommunicatorPtr tp;
  torch::TensorOptions param_options;
  torch::Tensor weight;  // (C), replicated
  bool sum_weight_grad_over_tp = true;
};
TORCH_MODULE(RMSNorm);

// T5's bucketing of key - query distances: exact buckets for short distances, logarithmic ones up to
// max_distance; bidirectional (encoder) splits the buckets between the two signs, causal looks backwards only.
torch::Tensor relative_position_bucket(const torch::Tensor& relative_position, bool bidirectional,
                                       int64_t num_buckets, int64_t max_distance);

// The learned bias table, split by head: computed once per stack and shared by all blocks. A half-precision table
// (bf16, fp16) gives an fp32 bias: the lookup's backward sums each bucket's many positions in fp32.
class RelativePositionBiasImpl : public torch::nn::Cloneable<RelativePositionBiasImpl>, public ShardedModule {
 public:
  RelativePositionBiasImpl(const ModelConfig& config, bool bidirectional, CommunicatorPtr tp,
                           torch::TensorOptions param_options);
  void reset() override;
  // (1, Hl, query_length, key_length) for queries at positions query_offset .. query_offset + query_length - 1; fp32
  // for a half-precision table.
  torch::Tensor forward(int64_t query_length, int64_t key_length, int64_t query_offset = 0);
  std::vector<ParameterLayout> parameter_layouts() const override;

  int64_t num_buckets, max_distance, num_heads;
  bool bidirectional;
  CommunicatorPtr tp;
  torch::TensorOptions param_options;
  torch::Tensor weight;  // (num_buckets, H / tp)
};
TORCH_MODULE(RelativePositionBias);

// forward: `half_copy` itself (a view, no copy), the one half-precision copy of `source` that every block reads;
// backward: the gradient cast to fp32, for `source`. Each block reads the copy through its own edge, so autograd sums
// the blocks' gradients of the shared bias in fp32 at `source`, not in bf16 at the copy (half_copy: no gradient).
torch::Tensor read_with_fp32_gradient(const torch::Tensor& half_copy, const torch::Tensor& source);

// How attention computes softmax(q k^T + bias) v:
//   explicit: two matmuls around an fp32 softmax, dropout from the TP stream (bit-equal to transformers);
//   sdpa: at::scaled_dot_product_attention with scale 1 and the bias as its float mask; on CUDA the
//     memory-efficient kernel, which also returns the bias gradient the relative positions need, with its
//     dropout drawn from the TP stream (TensorParallelStreamAsDefault);
//   cudnn: cuDNN's fused flash attention (dist/fused_attention.h) through the CUDA backend, with the position bias
//     as (1, H, T, S) and its gradient, the causal mask and padding given as such (AttentionMasking, not folded into
//     the bias), dropout from the TP stream's seed and offset, in training; where cuDNN does not take a call (fp32,
//     a head dim it is not used for, a bias per row, no GPU, a graph cuDNN refuses) the sdpa kernel runs instead,
//     and the log and attention_kernels_description say so. Evaluation and generation run sdpa (generation's
//     lengths change every step: a graph each). Off unless asked for (model.attention, t5scale-bench --attention)
//     until a GPU has measured it.
// On CPU a mask that needs a gradient sends SDPA to its math path, which measured no faster than explicit
// (forward + backward of (8, 8, 128, 64) on one thread: 33-41 ms against 36-40 ms), so CPU keeps explicit.
enum class AttentionKernel { kExplicit, kSdpa, kCudnn };
AttentionKernel default_attention_kernel(torch::Device device);  // CUDA: sdpa; elsewhere: explicit
const char* attention_kernel_name(AttentionKernel kernel);        // "explicit", "sdpa", "cudnn"

// The masks of an attention call that the bias does not carry: with the cudnn kernel the stack passes the position
// bias alone and these beside it; every other caller passes none (its masks are in its additive bias).
struct AttentionMasking {
  bool causal = false;        // query i attends keys 0..i (the decoder's self-attention)
  torch::Tensor key_lengths;  // (B) int32: row b attends its first key_lengths[b] keys; undefined: all
  bool any() const { return causal || key_lengths.defined(); }
};
// Each row's token count (B) int32 from an additive padding mask (B, 1, 1, S) that is 0 on tokens (right-padded
// rows, as the collation makes them); undefined for an undefined mask.
torch::Tensor key_lengths_of_padding_mask(const torch::Tensor& additive_mask);
// `bias` with the masks added as the other kernels take them (the dtype's lowest value where masked):
// (1 or B, H, T, S).
torch::Tensor bias_with_masks(const torch::Tensor& bias, const AttentionMasking& masking, int64_t query_length,
                              int64_t key_length, torch::ScalarType dtype, torch::Device device);

// Whether the cudnn kernel runs a call (q (B, Hl, T, D), k (B, Hl, S, D), bias as the core gets it): "" when it
// does, else the reason the sdpa kernel runs it ("fp32 (cuDNN's fused attention takes fp16 and bf16)").
// cuda_unavailable: why this process has no CUDA backend or no cuDNN attention ("" when it has).
std::string cudnn_attention_refusal(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& bias,
                                    const AttentionMasking& masking, double dropout, int compute_capability_major,
                                    const std::string& cuda_unavailable);

enum class SdpaBackend { kMath, kFlash, kEfficient };
SdpaBackend sdpa_backend_for(torch::Device device, torch::ScalarType dtype, bool has_mask);
const char* sdpa_backend_name(SdpaBackend backend);  // "math", "flash", "efficient"
// What a model's attention runs, for the log and the run file: "explicit", or the SDPA kernel of each call site
// ("sdpa: self-attention efficient; cross-attention flash, efficient when padded"), or with cudnn whether cuDNN
// takes the model's calls, from what is known before a step (dtype, head dim, device, the backend) ("cudnn:
// self-attention and cross-attention cuDNN fused attention", or "cudnn refused (fp32 (...)): sdpa: ...").
std::string attention_kernels_description(AttentionKernel kernel, torch::Device device, torch::ScalarType dtype,
                                          int64_t head_dim = 64);

// Multi-head attention without score scaling (T5 folds 1/sqrt(D) into the initialisation). The input of q, k
// and v enters the TP region once per sub-layer (one backward all-reduce, as in Megatron's fused QKV).
class T5AttentionImpl : public torch::nn::Module {
 public:
  T5AttentionImpl(const ModelConfig& config, CommunicatorPtr tp, std::shared_ptr<ParallelRng> rng,
                  torch::TensorOptions param_options);
  // Self-attention over hidden (B, T, C); bias broadcastable to (B, Hl, T, T): relative-position bias plus
  // additive mask. Returns (B, T, C); with layout kSplit hidden and the result are this rank's (B, T / tp, C).
  torch::Tensor forward(const torch::Tensor& hidden, const torch::Tensor& bias,
                        SequenceLayout layout = SequenceLayout::kReplicated, const AttentionMasking& masking = {});
  // Cross-attention: queries from hidden (B, T, C), keys and values from encoder_output (B, S, C), which the
  // caller has put in the TP region (copy_to_tensor_parallel_region, or under sequence parallelism
  // gather_from_sequence_parallel_region) once for every decoder block; layout as for forward().
  torch::Tensor forward_cross(const torch::Tensor& hidden, const torch::Tensor& encoder_output,
                              const torch::Tensor& bias, SequenceLayout layout = SequenceLayout::kReplicated,
                              const AttentionMasking& masking = {});

  // The projections take inputs already in the TP region (copy_to_tensor_parallel_region, the identity in
  // forward: generation without gradients may pass plain hidden states).
  torch::Tensor project_query(const torch::Tensor& region_hidden);  // (B, Hl, T, D)
  std::pair<torch::Tensor, torch::Tensor> project_key_value(const torch::Tensor& region_input);  // 2 x (B, Hl, S, D)
  // (B, T, C), or with output kSplit this rank's (B, T / tp, C): the core, then the output projection.
  torch::Tensor attend(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                       const torch::Tensor& bias, SequenceLayout output = SequenceLayout::kReplicated,
                       const AttentionMasking& masking = {});
  // The attention core, softmax(q k^T + bias) v with dropout on the probabilities, per head: (B, Hl, T, D). With
  // recompute_core while training it keeps only its inputs and computes itself again in backward.
  torch::Tensor core(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                     const torch::Tensor& bias, const AttentionMasking& masking = {});
  torch::Tensor core_kept(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                          const torch::Tensor& bias,
                          const AttentionMasking& masking = {});  // the core, its activations kept for backward
  torch::Tensor split_heads(const torch::Tensor& projected) const;  // (B, L, Hl * D) -> (B, Hl, L, D)
  // The core through SDPA's pinned kernel (sdpa_backend_for), dropout p from the TP stream.
  torch::Tensor sdpa_core(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                          const torch::Tensor& bias, double p);

  int64_t heads_per_rank, d_kv;
  double dropout_rate;
  // With the cudnn kernel: the reasons cuDNN did not take a call, each logged once when first seen (a set: calls of
  // every shape pass here, the log names each reason once).
  std::set<std::string> cudnn_refusals;
  AttentionKernel kernel;  // default_attention_kernel of the parameters' device; T5Model::set_attention_kernel
  // Selective recomputation (Megatron's): the core's scores, softmax, dropout mask and probabilities are not kept but
  // made again in backward, from q, k, v, the bias and the RNG states of the forward
  // (T5Model::set_selective_recomputation).
  bool recompute_core = false;
  CommunicatorPtr tp;
  std::shared_ptr<ParallelRng> rng;  // attention probabilities are split by head: the TP stream
  ColumnParallelLinear q{nullptr}, k{nullptr}, v{nullptr};  // each (H / tp * D, C), input copied by the caller
  RowParallelLinear o{nullptr};                              // (C, H / tp * D)
};
TORCH_MODULE(T5Attention);

// Feed-forward: wo(dropout(relu(wi x))) for v1.0, wo(dropout(gelu_tanh(wi_0 x) * wi_1 x)) for v1.1.
class T5FeedForwardImpl : public torch::nn::Module {
 public:
  T5FeedForwardImpl(const ModelConfig& config, CommunicatorPtr tp, std::shared_ptr<ParallelRng> rng,
                    torch::TensorOptions param_options);
  // hidden (B, T, C) -> (B, T, C); with layout kSplit this rank's (B, T / tp, C) in and out.
  torch::Tensor forward(const torch::Tensor& hidden, SequenceLayout layout = SequenceLayout::kReplicated);

  FeedForwardKind kind;
  double dropout_rate;
  CommunicatorPtr tp;
  std::shared_ptr<ParallelRng> rng;  // the inner activations are split by column: the TP stream
  // Each (d_ff / tp, C); wi for relu only. Their input enters the TP region once, in forward().
  ColumnParallelLinear wi{nullptr}, wi_0{nullptr}, wi_1{nullptr};
  RowParallelLinear wo{nullptr};                                    // (C, d_ff / tp)
};
TORCH_MODULE(T5FeedForward);

// Keys and values a decoder block keeps between generation steps.
struct DecoderLayerCache {
  torch::Tensor self_key, self_value;    // (B, Hl, t, D), grows by one position per step
  torch::Tensor cross_key, cross_value;  // (B, Hl, S, D), computed once from the encoder output
};

// One pre-norm residual block; a decoder block adds cross-attention over the encoder output.
class T5BlockImpl : public torch::nn::Module {
 public:
  T5BlockImpl(const ModelConfig& config, bool is_decoder, CommunicatorPtr tp, std::shared_ptr<ParallelRng> rng,
              torch::TensorOptions param_options);
  // layout: of hidden and the result (the residual stream); encoder_output: in the TP region already, whole (see
  // T5AttentionImpl::forward_cross).
  // self_masking, cross_masking: the masks the biases do not carry (the cudnn kernel's; see AttentionMasking).
  torch::Tensor forward(const torch::Tensor& hidden, const torch::Tensor& self_bias,
                        const torch::Tensor& encoder_output = {}, const torch::Tensor& cross_bias = {},
                        SequenceLayout layout = SequenceLayout::kReplicated, const AttentionMasking& self_masking = {},
                        const AttentionMasking& cross_masking = {});
  // One decoder position (B, 1, C) against the cache, which it extends.
  torch::Tensor forward_step(const torch::Tensor& hidden, const torch::Tensor& self_bias, DecoderLayerCache& cache,
                             const torch::Tensor& cross_bias);

  bool is_decoder;
  double dropout_rate;
  std::shared_ptr<ParallelRng> rng;  // the residual dropouts' streams
  RMSNorm self_attn_norm{nullptr}, cross_attn_norm{nullptr}, ff_norm{nullptr};
  T5Attention self_attn{nullptr}, cross_attn{nullptr};
  T5FeedForward ff{nullptr};
};
TORCH_MODULE(T5Block);

// Dropout on the residual stream: replicated over TP it draws from the stream all TP ranks share (the same mask on
// every rank); split by sequence each rank holds other tokens and draws from its TP stream, as Megatron does. So
// with dropout on, a sequence-parallel run draws other masks than the same grid without it (equally distributed).
torch::Tensor residual_dropout(const torch::Tensor& hidden, double p, bool training, SequenceLayout layout,
                               ParallelRng& rng);

// fp16 only: keeps activations finite as Hugging Face's T5 does (clamp to the largest finite value, less 1000
// once an inf has appeared). A no-op for other dtypes. On a sequence split each rank looks for an inf among its own
// tokens only (no collective per block for a guard against overflow).
torch::Tensor clamp_fp16(const torch::Tensor& hidden);

}  // namespace t5scale
