#include "model/t5_layers.h"

#include <ATen/Context.h>

#include <cmath>
#include <map>
#include <mutex>
#include <optional>

#include "core/check.h"
#include "dist/cuda_backend.h"
#include "model/activation_checkpoint.h"
#include "model/autograd_saved_object.h"
#include "model/parameter_allocation.h"
#include "model/t5_model.h"
#include "model/tensor_parallel_mappings.h"

namespace t5scale {

torch::Tensor clamp_fp16(const torch::Tensor& hidden) {
  if (hidden.scalar_type() != torch::kHalf) return hidden;
  // transformers' fp16 guard, with the choice of bound made on the device: no read-back per layer.
  const double max_half = 65504.0;
  const torch::Tensor bound = torch::where(hidden.isinf().any(), torch::scalar_tensor(max_half - 1000.0, hidden.options()),
                                           torch::scalar_tensor(max_half, hidden.options()));
  return torch::clamp(hidden, -bound, bound);
}

// ---- RMSNorm ----

RMSNormImpl::RMSNormImpl(int64_t dim_, double eps_, CommunicatorPtr tp_, torch::TensorOptions param_options_)
    : dim(dim_), eps(eps_), tp(std::move(tp_)), param_options(param_options_) {
  reset();
}

void RMSNormImpl::reset() {
  weight = register_parameter("weight", allocate_parameter("an RMSNorm weight", {dim}, param_options));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& hidden, SequenceLayout input) {
  // Identity forward; backward sums this rank's part of the weight's gradient over the TP group (unless the caller
  // sums it later).
  const torch::Tensor weight = input == SequenceLayout::kSplit && sum_weight_grad_over_tp
                                   ? copy_to_tensor_parallel_region(this->weight, *tp)
                                   : this->weight;
  if (hidden.scalar_type() == torch::kFloat64) {
    // T5's own formula, variance in fp32 even for fp64 inputs as transformers computes it: fp64 models exist to
    // check t5scale against transformers and against itself to 1e-10.
    const torch::Tensor variance = hidden.to(torch::kFloat32).pow(2).mean(-1, /*keepdim=*/true);
    return weight * (hidden * torch::rsqrt(variance + eps));
  }
  // One kernel forward and one backward on CUDA (ATen's fused RMSNorm, which keeps only its input and a fp32 rstd
  // per row); the variance is accumulated in fp32. fp32 gives T5's values bit for bit; in bf16 and fp16 the product
  // with the weight is taken in fp32 before the one rounding, where T5 rounds the normalised value first (one
  // rounding apart).
  return at::rms_norm(hidden, {dim}, weight, eps);
}

std::vector<ParameterLayout> RMSNormImpl::parameter_layouts() const { return {{"weight", {dim}, -1}}; }

// ---- relative position bias ----

torch::Tensor relative_position_bucket(const torch::Tensor& relative_position, bool bidirectional,
                                       int64_t num_buckets, int64_t max_distance) {
  torch::Tensor buckets = torch::zeros_like(relative_position);
  torch::Tensor distance;
  if (bidirectional) {
    num_buckets /= 2;
    buckets = buckets + (relative_position > 0).to(torch::kLong) * num_buckets;
    distance = relative_position.abs();
  } else {
    distance = -torch::clamp_max(relative_position, 0);  // only keys before the query count
  }
  const int64_t max_exact = num_buckets / 2;
  const torch::Tensor is_small = distance < max_exact;
  torch::Tensor if_large =
      max_exact + (torch::log(distance.to(torch::kFloat32) / static_cast<double>(max_exact)) /
                   std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)) *
                   static_cast<double>(num_buckets - max_exact))
                      .to(torch::kLong);
  if_large = torch::clamp_max(if_large, num_buckets - 1);
  return buckets + torch::where(is_small, distance, if_large);
}

RelativePositionBiasImpl::RelativePositionBiasImpl(const ModelConfig& config, bool bidirectional_, CommunicatorPtr tp_,
                                                   torch::TensorOptions param_options_)
    : num_buckets(config.relative_attention_num_buckets),
      max_distance(config.relative_attention_max_distance),
      num_heads(config.num_heads),
      bidirectional(bidirectional_),
      tp(std::move(tp_)),
      param_options(param_options_) {
  reset();
}

void RelativePositionBiasImpl::reset() {
  T5S_CHECK_DIVISIBLE(num_heads, tp->size());
  weight = register_parameter("weight", allocate_parameter("the relative position bias",
                                                          {num_buckets, num_heads / tp->size()}, param_options));
}

torch::Tensor RelativePositionBiasImpl::forward(int64_t query_length, int64_t key_length, int64_t query_offset) {
  const auto long_options = torch::TensorOptions().dtype(torch::kLong).device(weight.device());
  const torch::Tensor query_position =
      torch::arange(query_offset, query_offset + query_length, long_options).unsqueeze(1);
  const torch::Tensor key_position = torch::arange(key_length, long_options).unsqueeze(0);
  const torch::Tensor buckets =
      relative_position_bucket(key_position - query_position, bidirectional, num_buckets, max_distance);
  const bool half = weight.scalar_type() == torch::kBFloat16 || weight.scalar_type() == torch::kHalf;
  // Contiguous (H, Lq, Lk): SDPA's fused CUDA kernels take a float mask only with its last dimension dense.
  return torch::embedding(half ? weight.to(torch::kFloat32) : weight, buckets).permute({2, 0, 1}).contiguous().unsqueeze(0);
}

namespace {

struct ReadWithFp32Gradient : torch::autograd::Function<ReadWithFp32Gradient> {
  static torch::Tensor forward(torch::autograd::AutogradContext*, const torch::Tensor& half_copy,
                               const torch::Tensor& source) {
    T5S_CHECK(half_copy.sizes() == source.sizes(), "read_with_fp32_gradient: the copy is ", half_copy.sizes(),
              ", its source ", source.sizes());
    return half_copy.view_as(half_copy);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {torch::Tensor(), grads[0].defined() ? grads[0].to(torch::kFloat32) : torch::Tensor()};
  }
};

}  // namespace

torch::Tensor read_with_fp32_gradient(const torch::Tensor& half_copy, const torch::Tensor& source) {
  return ReadWithFp32Gradient::apply(half_copy, source);
}

std::vector<ParameterLayout> RelativePositionBiasImpl::parameter_layouts() const {
  return {{"weight", {num_buckets, num_heads}, 1}};
}

// ---- attention ----

T5AttentionImpl::T5AttentionImpl(const ModelConfig& config, CommunicatorPtr tp_, std::shared_ptr<ParallelRng> rng_,
                                 torch::TensorOptions param_options)
    : d_kv(config.d_kv),
      dropout_rate(config.dropout_rate),
      kernel(default_attention_kernel(param_options.device())),
      tp(tp_),
      rng(std::move(rng_)) {
  T5S_CHECK_DIVISIBLE(config.num_heads, tp->size());
  heads_per_rank = config.num_heads / tp->size();
  const int64_t inner = config.inner_dim();
  auto column = [&](const char* name) {
    return register_module(name, ColumnParallelLinear(ColumnParallelLinearOptions(config.d_model, inner)
                                                          .copy_input(false)
                                                          .param_options(param_options),
                                                      tp));
  };
  q = column("q");
  k = column("k");
  v = column("v");
  o = register_module(
      "o", RowParallelLinear(RowParallelLinearOptions(inner, config.d_model).param_options(param_options), tp));
}

torch::Tensor T5AttentionImpl::split_heads(const torch::Tensor& projected) const {
  return projected.view({projected.size(0), projected.size(1), heads_per_rank, d_kv}).transpose(1, 2);
}

torch::Tensor T5AttentionImpl::project_query(const torch::Tensor& region_hidden) {
  return split_heads(q(region_hidden));
}

std::pair<torch::Tensor, torch::Tensor> T5AttentionImpl::project_key_value(const torch::Tensor& region_input) {
  return {split_heads(k(region_input)), split_heads(v(region_input))};
}

AttentionKernel default_attention_kernel(torch::Device device) {
  return device.is_cuda() ? AttentionKernel::kSdpa : AttentionKernel::kExplicit;
}

SdpaBackend sdpa_backend_for(torch::Device device, torch::ScalarType dtype, bool has_mask) {
  if (!device.is_cuda()) return SdpaBackend::kMath;
  if (!has_mask && (dtype == torch::kBFloat16 || dtype == torch::kHalf)) return SdpaBackend::kFlash;
  return SdpaBackend::kEfficient;
}

const char* sdpa_backend_name(SdpaBackend backend) {
  switch (backend) {
    case SdpaBackend::kMath: return "math";
    case SdpaBackend::kFlash: return "flash";
    case SdpaBackend::kEfficient: return "efficient";
  }
  return "?";
}

const char* attention_kernel_name(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kExplicit: return "explicit";
    case AttentionKernel::kSdpa: return "sdpa";
    case AttentionKernel::kCudnn: return "cudnn";
  }
  return "?";
}

namespace {

std::string sdpa_description(torch::Device device, torch::ScalarType dtype) {
  const std::string masked = sdpa_backend_name(sdpa_backend_for(device, dtype, true));
  const std::string unmasked = sdpa_backend_name(sdpa_backend_for(device, dtype, false));
  return "sdpa: self-attention " + masked + "; cross-attention " +
         (unmasked == masked ? masked : unmasked + ", " + masked + " when padded");
}

// What this process's CUDA side says of cuDNN's fused attention on `device`: why not ("" when it can), and the
// device's compute capability. Asked once per device.
struct CudnnContext {
  std::string unavailable;
  int compute_capability_major = 0;
};

CudnnContext cudnn_context(torch::Device device) {
  if (!device.is_cuda()) return {"not on a CUDA device", 0};
  static std::mutex mutex;
  static std::map<int, CudnnContext> known;
  std::lock_guard<std::mutex> lock(mutex);
  const int index = device.has_index() ? device.index() : 0;
  auto found = known.find(index);
  if (found != known.end()) return found->second;
  CudnnContext context;
  std::string why_not;
  if (const CudaBackend* backend = cuda_backend(&why_not)) {
    context.unavailable = backend->fused_attention_unavailable();
    context.compute_capability_major = backend->device_facts(index).compute_capability_major;
  } else {
    context.unavailable = "no CUDA backend: " + why_not;
  }
  known.emplace(index, context);
  return context;
}

}  // namespace

std::string attention_kernels_description(AttentionKernel kernel, torch::Device device, torch::ScalarType dtype,
                                          int64_t head_dim) {
  if (kernel == AttentionKernel::kExplicit) return "explicit";
  if (kernel == AttentionKernel::kSdpa) return sdpa_description(device, dtype);
  const CudnnContext context = cudnn_context(device);
  std::string refusal = context.unavailable;
  if (refusal.empty()) {
    FusedAttentionShape probe;  // what is known before a step: the dtype, the head dim, the device
    probe.batch = probe.heads = probe.query_length = probe.key_length = 1;
    probe.head_dim = head_dim;
    probe.dtype = attention_dtype(dtype);
    probe.compute_capability_major = context.compute_capability_major;
    refusal = fused_attention_refusal(probe);
  }
  if (!refusal.empty()) return "cudnn refused (" + refusal + "), so " + sdpa_description(device, dtype);
  return "cudnn: self-attention and cross-attention in training cuDNN fused attention (sdpa for a call cuDNN does "
         "not take); evaluation and generation " + sdpa_description(device, dtype);
}

torch::Tensor key_lengths_of_padding_mask(const torch::Tensor& additive_mask) {
  if (!additive_mask.defined()) return torch::Tensor();
  return (additive_mask == 0).sum(-1).reshape({additive_mask.size(0)}).to(torch::kInt32);
}

torch::Tensor bias_with_masks(const torch::Tensor& bias, const AttentionMasking& masking, int64_t query_length,
                              int64_t key_length, torch::ScalarType dtype, torch::Device device) {
  torch::Tensor result = bias;
  const auto add = [&](const torch::Tensor& mask) { result = result.defined() ? result + mask : mask; };
  if (masking.causal) {
    T5S_CHECK(query_length == key_length, "a causal mask needs as many queries as keys: ", query_length, " and ",
              key_length);
    add(causal_additive_mask(query_length, dtype, device));
  }
  if (masking.key_lengths.defined()) {
    const torch::Tensor positions = torch::arange(key_length, masking.key_lengths.options().dtype(torch::kLong));
    add(padding_additive_mask(positions.unsqueeze(0) < masking.key_lengths.unsqueeze(1).to(torch::kLong), dtype));
  }
  return result;
}

std::string cudnn_attention_refusal(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& bias,
                                    const AttentionMasking& masking, double dropout, int compute_capability_major,
                                    const std::string& cuda_unavailable) {
  if (!cuda_unavailable.empty()) return cuda_unavailable;
  FusedAttentionShape shape;
  shape.batch = query.size(0);
  shape.heads = query.size(1);
  shape.query_length = query.size(2);
  shape.key_length = key.size(2);
  shape.head_dim = query.size(3);
  shape.dtype = attention_dtype(query.scalar_type());
  if (bias.defined()) {
    const bool per_head = bias.dim() == 4 && bias.size(0) == 1 && bias.size(1) == shape.heads &&
                          bias.size(2) == shape.query_length && bias.size(3) == shape.key_length;
    shape.bias = per_head;
    shape.bias_per_row = !per_head;
  }
  shape.causal = masking.causal;
  shape.padded = masking.key_lengths.defined();
  shape.dropout = dropout;
  shape.compute_capability_major = compute_capability_major;
  return fused_attention_refusal(shape);
}

namespace {

// Only `backend` enabled for SDPA while it lives; the process's settings come back after.
class OnlySdpaBackend {
 public:
  explicit OnlySdpaBackend(SdpaBackend backend)
      : flash_(context().userEnabledFlashSDP()),
        fa3_(context().userEnabledFA3SDP()),
        efficient_(context().userEnabledMemEfficientSDP()),
        math_(context().userEnabledMathSDP()),
        cudnn_(context().userEnabledCuDNNSDP()),
        overrideable_(context().userEnabledOverrideableSDP()) {
    context().setSDPUseFlash(backend == SdpaBackend::kFlash);
    context().setSDPUseFA3(false);
    context().setSDPUseMemEfficient(backend == SdpaBackend::kEfficient);
    context().setSDPUseMath(backend == SdpaBackend::kMath);
    context().setSDPUseCuDNN(false);
    context().setSDPUseOverrideable(false);
  }
  ~OnlySdpaBackend() {
    context().setSDPUseFlash(flash_);
    context().setSDPUseFA3(fa3_);
    context().setSDPUseMemEfficient(efficient_);
    context().setSDPUseMath(math_);
    context().setSDPUseCuDNN(cudnn_);
    context().setSDPUseOverrideable(overrideable_);
  }
  OnlySdpaBackend(const OnlySdpaBackend&) = delete;
  OnlySdpaBackend& operator=(const OnlySdpaBackend&) = delete;

 private:
  static at::Context& context() { return at::globalContext(); }
  bool flash_, fa3_, efficient_, math_, cudnn_, overrideable_;
};

// cuDNN's fused attention as an autograd function: forward and backward through the CUDA backend. Custom functions
// take no undefined tensors: a call without a bias or without key lengths gets an empty placeholder and a flag.
struct CudnnAttentionFunction : torch::autograd::Function<CudnnAttentionFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const CudaBackend* backend, ParallelRng* rng,
                               bool has_bias, bool has_lengths, bool causal, double dropout, bool with_backward,
                               const torch::Tensor& key_lengths, const torch::Tensor& query, const torch::Tensor& key,
                               const torch::Tensor& value, const torch::Tensor& bias) {
    FusedAttentionInputs in{query, key, value, has_bias ? bias : torch::Tensor(),
                            has_lengths ? key_lengths : torch::Tensor(), causal, dropout};
    const bool bias_gradient = has_bias && bias.requires_grad();
    FusedAttentionForwardResult result =
        backend->fused_attention_forward(in, rng->tensor_parallel(), with_backward, bias_gradient);
    save_object(ctx, "backend", backend);
    ctx->saved_data["has_bias"] = has_bias;
    ctx->saved_data["bias_gradient"] = bias_gradient;
    ctx->saved_data["has_lengths"] = has_lengths;
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["dropout"] = dropout;
    ctx->saved_data["seed"] = result.seed;
    ctx->saved_data["offset"] = result.offset;
    ctx->saved_data["stats"] = result.stats;
    ctx->save_for_backward({query, key, value, bias, key_lengths, result.output});
    return result.output;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto* backend = saved_object<const CudaBackend>(ctx, "backend");
    const auto saved = ctx->get_saved_variables();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    FusedAttentionInputs in{saved[0], saved[1], saved[2], has_bias ? saved[3] : torch::Tensor(),
                            ctx->saved_data["has_lengths"].toBool() ? saved[4] : torch::Tensor(),
                            ctx->saved_data["causal"].toBool(), ctx->saved_data["dropout"].toDouble()};
    FusedAttentionForwardResult forward;
    forward.output = saved[5];
    forward.stats = ctx->saved_data["stats"].toTensor();
    forward.seed = ctx->saved_data["seed"].toInt();
    forward.offset = ctx->saved_data["offset"].toInt();
    const FusedAttentionGradients grads =
        backend->fused_attention_backward(in, forward, grad_outputs[0], ctx->saved_data["bias_gradient"].toBool());
    torch::autograd::variable_list result(8);  // the flags and the key lengths: no gradient
    result.insert(result.end(), {grads.query, grads.key, grads.value, grads.bias});
    return result;
  }
};

}  // namespace

torch::Tensor T5AttentionImpl::core(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                                    const torch::Tensor& bias, const AttentionMasking& masking) {
  if (recompute_core && is_training() && torch::GradMode::is_enabled()) {
    return recomputed_attention_core(*this, query, key, value, bias, masking);
  }
  return core_kept(query, key, value, bias, masking);
}

torch::Tensor T5AttentionImpl::core_kept(const torch::Tensor& query, const torch::Tensor& key,
                                         const torch::Tensor& value, const torch::Tensor& bias,
                                         const AttentionMasking& masking) {
  if (kernel == AttentionKernel::kCudnn) {
    // The sdpa kernel, with the masks in the bias as it takes them.
    const auto sdpa_with_masks = [&](double p) {
      return sdpa_core(query, key, value,
                       masking.any() ? bias_with_masks(bias, masking, query.size(2), key.size(2), query.scalar_type(),
                                                       query.device())
                                     : bias,
                       p);
    };
    // Evaluation and generation run the sdpa kernel: generation's lengths change every step (a graph each).
    if (!is_training()) return sdpa_with_masks(0.0);
    const CudnnContext context = cudnn_context(query.device());
    std::string refusal = cudnn_attention_refusal(query, key, bias, masking, dropout_rate,
                                                  context.compute_capability_major, context.unavailable);
    if (refusal.empty()) {
      const torch::Tensor absent = torch::empty({0}, query.options());
      try {
        // The backward's graph is built with the forward's, also where grad mode is off (a checkpointed block's
        // first forward): a backward graph refused in the recompute only would send it to another kernel, with
        // another dropout mask. (B, T, Hl, D) from cuDNN, the layout the output projection reads; (B, Hl, T, D) as a
        // view.
        return CudnnAttentionFunction::apply(
                   cuda_backend(), rng.get(), bias.defined(), masking.key_lengths.defined(), masking.causal,
                   dropout_rate, /*with_backward=*/true,
                   masking.key_lengths.defined() ? masking.key_lengths : absent.to(torch::kInt32), query, key, value,
                   bias.defined() ? bias.contiguous() : absent)
            .transpose(1, 2);
      } catch (const Error& e) {
        refusal = std::string("cuDNN refused the graph: ") + e.what();  // thrown before anything ran
      }
    }
    cudnn_refusals.insert(refusal);
    return sdpa_with_masks(dropout_rate);
  }
  torch::Tensor heads_context;  // (B, Hl, T, D)
  if (kernel == AttentionKernel::kSdpa) {
    heads_context = sdpa_core(query, key, value, bias, is_training() ? dropout_rate : 0.0);
  } else {
    torch::Tensor scores = torch::matmul(query, key.transpose(3, 2));  // (B, Hl, T, S)
    if (bias.defined()) scores = scores + bias;
    torch::Tensor weights = torch::softmax(scores.to(torch::kFloat32), -1).to(scores.scalar_type());
    weights = tensor_parallel_dropout(weights, dropout_rate, is_training(), *rng);
    heads_context = torch::matmul(weights, value);
  }
  return heads_context;
}

torch::Tensor T5AttentionImpl::sdpa_core(const torch::Tensor& query, const torch::Tensor& key,
                                         const torch::Tensor& value, const torch::Tensor& bias, double p) {
  std::optional<TensorParallelStreamAsDefault> tp_stream;
  if (p > 0.0) tp_stream.emplace(*rng);
  const std::optional<torch::Tensor> mask = bias.defined() ? std::optional<torch::Tensor>(bias) : std::nullopt;
  OnlySdpaBackend pinned(sdpa_backend_for(query.device(), query.scalar_type(), bias.defined()));
  return at::scaled_dot_product_attention(query, key, value, mask, p, /*is_causal=*/false, /*scale=*/1.0);
}

torch::Tensor T5AttentionImpl::attend(const torch::Tensor& query, const torch::Tensor& key, const torch::Tensor& value,
                                      const torch::Tensor& bias, SequenceLayout output,
                                      const AttentionMasking& masking) {
  const torch::Tensor context = core(query, key, value, bias, masking).transpose(1, 2).contiguous();  // (B, T, Hl, D)
  return o(context.view({context.size(0), context.size(1), heads_per_rank * d_kv}), output);
}

torch::Tensor T5AttentionImpl::forward(const torch::Tensor& hidden, const torch::Tensor& bias, SequenceLayout layout,
                                       const AttentionMasking& masking) {
  if (layout == SequenceLayout::kSplit) {
    const auto qkv = column_parallel_from_sequence_split(hidden, {q.get(), k.get(), v.get()}, *tp);
    return attend(split_heads(qkv[0]), split_heads(qkv[1]), split_heads(qkv[2]), bias, layout, masking);
  }
  const torch::Tensor region_hidden = copy_to_tensor_parallel_region(hidden, *tp);
  auto [key, value] = project_key_value(region_hidden);
  return attend(project_query(region_hidden), key, value, bias, SequenceLayout::kReplicated, masking);
}

torch::Tensor T5AttentionImpl::forward_cross(const torch::Tensor& hidden, const torch::Tensor& encoder_output,
                                             const torch::Tensor& bias, SequenceLayout layout,
                                             const AttentionMasking& masking) {
  // One edge per block into the encoder's output: the key's and value's gradients are summed here first, as the
  // recompute of a checkpointed block sums them, so that the encoder's gradient adds the blocks' parts in the same
  // order with and without activation checkpointing (the same step bit for bit).
  auto [key, value] = project_key_value(encoder_output.view_as(encoder_output));
  const torch::Tensor query = layout == SequenceLayout::kSplit
                                  ? split_heads(column_parallel_from_sequence_split(hidden, {q.get()}, *tp)[0])
                                  : project_query(copy_to_tensor_parallel_region(hidden, *tp));
  return attend(query, key, value, bias, layout, masking);
}

// ---- feed-forward ----

T5FeedForwardImpl::T5FeedForwardImpl(const ModelConfig& config, CommunicatorPtr tp_, std::shared_ptr<ParallelRng> rng_,
                                     torch::TensorOptions param_options)
    : kind(config.feed_forward), dropout_rate(config.dropout_rate), tp(tp_), rng(std::move(rng_)) {
  auto column = [&](const char* name) {
    return register_module(name, ColumnParallelLinear(ColumnParallelLinearOptions(config.d_model, config.d_ff)
                                                          .copy_input(false)
                                                          .param_options(param_options),
                                                      tp));
  };
  if (kind == FeedForwardKind::kRelu) {
    wi = column("wi");
  } else {
    wi_0 = column("wi_0");
    wi_1 = column("wi_1");
  }
  wo = register_module(
      "wo", RowParallelLinear(RowParallelLinearOptions(config.d_ff, config.d_model).param_options(param_options), tp));
}

torch::Tensor T5FeedForwardImpl::forward(const torch::Tensor& hidden, SequenceLayout layout) {
  // The input projections' outputs, (B, T, d_ff / tp) each.
  std::vector<torch::Tensor> projected;
  const bool relu = kind == FeedForwardKind::kRelu;
  if (layout == SequenceLayout::kSplit) {
    projected = column_parallel_from_sequence_split(
        hidden, relu ? std::vector<ColumnParallelLinearImpl*>{wi.get()}
                     : std::vector<ColumnParallelLinearImpl*>{wi_0.get(), wi_1.get()},
        *tp);
  } else {
    const torch::Tensor region_hidden = copy_to_tensor_parallel_region(hidden, *tp);
    projected = relu ? std::vector<torch::Tensor>{wi(region_hidden)}
                     : std::vector<torch::Tensor>{wi_0(region_hidden), wi_1(region_hidden)};
  }
  const torch::Tensor inner = relu ? torch::relu(projected[0]) : torch::gelu(projected[0], "tanh") * projected[1];
  return wo(tensor_parallel_dropout(inner, dropout_rate, is_training(), *rng), layout);
}

// ---- block ----

torch::Tensor residual_dropout(const torch::Tensor& hidden, double p, bool training, SequenceLayout layout,
                               ParallelRng& rng) {
  return layout == SequenceLayout::kSplit ? tensor_parallel_dropout(hidden, p, training, rng)
                                          : fused_dropout(hidden, p, training);
}

T5BlockImpl::T5BlockImpl(const ModelConfig& config, bool is_decoder_, CommunicatorPtr tp,
                         std::shared_ptr<ParallelRng> rng_, torch::TensorOptions param_options)
    : is_decoder(is_decoder_), dropout_rate(config.dropout_rate), rng(rng_) {
  auto norm = [&](const char* name) {
    return register_module(name, RMSNorm(config.d_model, config.layer_norm_epsilon, tp, param_options));
  };
  self_attn_norm = norm("self_attn_norm");
  self_attn = register_module("self_attn", T5Attention(config, tp, rng, param_options));
  if (is_decoder) {
    cross_attn_norm = norm("cross_attn_norm");
    cross_attn = register_module("cross_attn", T5Attention(config, tp, rng, param_options));
  }
  ff_norm = norm("ff_norm");
  ff = register_module("ff", T5FeedForward(config, tp, rng, param_options));
}

torch::Tensor T5BlockImpl::forward(const torch::Tensor& hidden, const torch::Tensor& self_bias,
                                   const torch::Tensor& encoder_output, const torch::Tensor& cross_bias,
                                   SequenceLayout layout, const AttentionMasking& self_masking,
                                   const AttentionMasking& cross_masking) {
  const bool training = is_training();
  auto dropout = [&](const torch::Tensor& x) { return residual_dropout(x, dropout_rate, training, layout, *rng); };
  torch::Tensor normed = self_attn_norm(hidden, layout);
  torch::Tensor h = clamp_fp16(hidden + dropout(self_attn(normed, self_bias, layout, self_masking)));
  if (is_decoder) {
    h = clamp_fp16(h + dropout(cross_attn->forward_cross(cross_attn_norm(h, layout), encoder_output, cross_bias,
                                                         layout, cross_masking)));
  }
  return clamp_fp16(h + dropout(ff(ff_norm(h, layout), layout)));
}

torch::Tensor T5BlockImpl::forward_step(const torch::Tensor& hidden, const torch::Tensor& self_bias,
                                        DecoderLayerCache& cache, const torch::Tensor& cross_bias) {
  T5S_CHECK(is_decoder, "forward_step is for decoder blocks");
  const bool training = is_training();
  const torch::Tensor normed = self_attn_norm(hidden);
  auto [key, value] = self_attn->project_key_value(normed);
  cache.self_key = cache.self_key.defined() ? torch::cat({cache.self_key, key}, 2) : key;
  cache.self_value = cache.self_value.defined() ? torch::cat({cache.self_value, value}, 2) : value;
  torch::Tensor h = clamp_fp16(
      hidden + fused_dropout(self_attn->attend(self_attn->project_query(normed), cache.self_key, cache.self_value,
                                                self_bias),
                              dropout_rate, training));
  h = clamp_fp16(h + fused_dropout(cross_attn->attend(cross_attn->project_query(cross_attn_norm(h)), cache.cross_key,
                                                       cache.cross_value, cross_bias),
                                    dropout_rate, training));
  return clamp_fp16(h + fused_dropout(ff(ff_norm(h)), dropout_rate, training));
}

}  // namespace t5scale
