#include "model/t5_model.h"

#include <cmath>
#include <ATen/CPUGeneratorImpl.h>
#include <limits>
#include <set>

#include "core/check.h"
#include "core/fnv1a.h"
#include "model/activation_checkpoint.h"
#include "model/tensor_parallel_mappings.h"
#include "model/vocab_parallel_cross_entropy.h"

namespace t5scale {

namespace {

double lowest_value(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32: return std::numeric_limits<float>::lowest();
    case torch::kFloat64: return std::numeric_limits<double>::lowest();
    case torch::kBFloat16: return static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest());
    case torch::kHalf: return static_cast<double>(std::numeric_limits<c10::Half>::lowest());
    default: throw Error(msg("no attention-mask value for dtype ", dtype));
  }
}

}  // namespace

torch::Tensor padding_additive_mask(const torch::Tensor& attention_mask, torch::ScalarType dtype) {
  if (!attention_mask.defined()) return torch::Tensor();
  const torch::Tensor mask = attention_mask.to(dtype).unsqueeze(1).unsqueeze(1);
  return (1.0 - mask) * lowest_value(dtype);
}

torch::Tensor causal_additive_mask(int64_t length, torch::ScalarType dtype, torch::Device device) {
  return torch::full({length, length}, lowest_value(dtype), torch::TensorOptions().dtype(dtype).device(device))
      .triu(1)
      .unsqueeze(0)
      .unsqueeze(0);
}

// ---- stack ----

T5StackImpl::T5StackImpl(const ModelConfig& config, bool is_decoder_, CommunicatorPtr tp_,
                         std::shared_ptr<ParallelRng> rng_, torch::TensorOptions param_options)
    : is_decoder(is_decoder_), dropout_rate(config.dropout_rate), tp(std::move(tp_)), rng(std::move(rng_)) {
  relative_attention_bias = register_module(
      "relative_attention_bias", RelativePositionBias(config, /*bidirectional=*/!is_decoder, tp, param_options));
  blocks = register_module("blocks", torch::nn::ModuleList());
  const int64_t num_blocks = is_decoder ? config.num_decoder_layers : config.num_layers;
  for (int64_t i = 0; i < num_blocks; ++i) blocks->push_back(T5Block(config, is_decoder, tp, rng, param_options));
  final_norm =
      register_module("final_norm", RMSNorm(config.d_model, config.layer_norm_epsilon, tp, param_options));
}

torch::Tensor T5StackImpl::forward(const torch::Tensor& embeddings, const torch::Tensor& self_mask,
                                   const torch::Tensor& encoder_output, const torch::Tensor& cross_mask,
                                   SequenceLayout layout) {
  const int64_t length = embeddings.size(1) * (layout == SequenceLayout::kSplit ? tp->size() : 1);
  const auto dtype = embeddings.scalar_type();
  // The bias is computed once and shared by all blocks; the mask rides along in it, as in the reference. Without a
  // mask (nothing padded) it stays (1, H, L, L), broadcast over the rows. In bf16 and fp16 it is made in fp32 and
  // cast once, and each block reads the one copy with its gradient handed back in fp32: the blocks' gradients are
  // summed in fp32 (transformers sums them in the compute dtype).
  torch::Tensor bias = relative_attention_bias(length, length);
  // The cudnn kernel takes the masks apart from the bias: the causal mask as such, padding as key lengths.
  const bool masks_apart =
      !blocks->is_empty() && blocks[0]->as<T5BlockImpl>()->self_attn->kernel == AttentionKernel::kCudnn;
  AttentionMasking self_masking, cross_masking;
  if (masks_apart) {
    self_masking.causal = is_decoder;
    self_masking.key_lengths = is_decoder ? torch::Tensor() : key_lengths_of_padding_mask(self_mask);
    cross_masking.key_lengths = key_lengths_of_padding_mask(cross_mask);
  } else if (self_mask.defined()) {
    bias = bias + self_mask;
  }
  const torch::Tensor block_cross_mask = masks_apart ? torch::Tensor() : cross_mask;
  const bool fp32_gradient = bias.scalar_type() != dtype && bias.requires_grad();
  const torch::Tensor shared_bias = fp32_gradient ? bias.detach().to(dtype) : bias.to(dtype);
  torch::Tensor hidden = residual_dropout(embeddings, dropout_rate, is_training(), layout, *rng);
  const bool checkpointing = checkpoint_every > 0 && is_training() && torch::GradMode::is_enabled();
  for (size_t i = 0; i < blocks->size(); ++i) {
    auto* block = blocks[i]->as<T5BlockImpl>();
    const torch::Tensor self_bias = fp32_gradient ? read_with_fp32_gradient(shared_bias, bias) : shared_bias;
    if (checkpointing && static_cast<int64_t>(i) % checkpoint_every == 0) {
      hidden = checkpointed_block_forward(*block, *rng, hidden, self_bias, encoder_output, block_cross_mask, layout,
                                          self_masking, cross_masking);
    } else {
      hidden = block->forward(hidden, self_bias, encoder_output, block_cross_mask, layout, self_masking, cross_masking);
    }
  }
  return residual_dropout(final_norm(hidden, layout), dropout_rate, is_training(), layout, *rng);
}

// ---- model ----

T5ModelImpl::T5ModelImpl(const ModelConfig& config, CommunicatorPtr tp, torch::TensorOptions param_options,
                         std::shared_ptr<ParallelRng> rng)
    : config_(config), tp_(std::move(tp)), rng_(std::move(rng)) {
  if (!rng_) {
    const torch::Device device = param_options.device().is_meta() ? torch::Device(torch::kCPU) : param_options.device();
    rng_ = std::make_shared<ParallelRng>(0, tp_->rank(), device);
  }
  check_valid(config_, "model");
  // Every split is checked here, before any parameter is allocated, with both numbers in the message.
  T5S_CHECK(config_.num_heads % tp_->size() == 0, "num_heads ", config_.num_heads, " is not divisible by tp ",
            tp_->size());
  T5S_CHECK(config_.d_ff % tp_->size() == 0, "d_ff ", config_.d_ff, " is not divisible by tp ", tp_->size());
  T5S_CHECK(config_.vocab_size % tp_->size() == 0, "vocab_size ", config_.vocab_size, " is not divisible by tp ",
            tp_->size());
  shared = register_module(
      "shared",
      VocabParallelEmbedding(VocabParallelEmbeddingOptions(config_.vocab_size, config_.d_model).param_options(param_options),
                             tp_));
  encoder = register_module("encoder", T5Stack(config_, /*is_decoder=*/false, tp_, rng_, param_options));
  decoder = register_module("decoder", T5Stack(config_, /*is_decoder=*/true, tp_, rng_, param_options));
  if (!config_.tie_word_embeddings) {
    // Its input enters the TP region in lm_logits, as the tied head's does.
    const auto head_options =
        ColumnParallelLinearOptions(config_.d_model, config_.vocab_size).copy_input(false).param_options(param_options);
    lm_head = register_module("lm_head", ColumnParallelLinear(head_options, tp_));
  }
}

void T5ModelImpl::set_activation_checkpointing(int64_t every_k_blocks) {
  T5S_CHECK(every_k_blocks >= 0, "activation checkpointing: every_k_blocks must be >= 0, got ", every_k_blocks);
  encoder->checkpoint_every = every_k_blocks;
  decoder->checkpoint_every = every_k_blocks;
}

void T5ModelImpl::set_selective_recomputation(bool on) {
  for (const auto& module : modules()) {
    if (auto* attention = module->as<T5AttentionImpl>()) attention->recompute_core = on;
  }
}

void T5ModelImpl::set_attention_kernel(AttentionKernel kernel) {
  for (const auto& module : modules()) {
    if (auto* attention = module->as<T5AttentionImpl>()) attention->kernel = kernel;
  }
}

std::string T5ModelImpl::attention_kernels() {
  const torch::Tensor& weight = shared->weight;
  for (const auto& module : modules()) {
    if (auto* attention = module->as<T5AttentionImpl>()) {
      std::string description =
          attention_kernels_description(attention->kernel, weight.device(), weight.scalar_type(), config_.d_kv);
      std::set<std::string> refusals;  // the calls cuDNN did not take so far, over every attention layer
      for (const auto& other : modules()) {
        if (auto* layer = other->as<T5AttentionImpl>()) {
          refusals.insert(layer->cudnn_refusals.begin(), layer->cudnn_refusals.end());
        }
      }
      for (const std::string& refusal : refusals) {
        description += "; sdpa ran where cuDNN did not take a call: " + refusal;
      }
      return description;
    }
  }
  return "none";
}

SequenceLayout T5ModelImpl::training_layout() const {
  return sequence_parallel_ && tp_->size() > 1 ? SequenceLayout::kSplit : SequenceLayout::kReplicated;
}

namespace {

void check_sequence_split(const char* what, int64_t length, int tp) {
  T5S_CHECK(length % tp == 0, "parallel.sequence_parallel splits every sequence over the TP group: the ", what,
            " length ", length, " is not divisible by tp ", tp,
            " (the trainer pads batches to a multiple of tp; a caller of the model must too)");
}

}  // namespace

torch::Tensor T5ModelImpl::encode(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                  SequenceLayout layout) {
  if (layout == SequenceLayout::kSplit) check_sequence_split("source", input_ids.size(1), tp_->size());
  const torch::Tensor embeddings = shared(input_ids, layout);
  return encoder(embeddings, padding_additive_mask(attention_mask, embeddings.scalar_type()), torch::Tensor(),
                 torch::Tensor(), layout);
}

torch::Tensor T5ModelImpl::lm_logits(const torch::Tensor& decoder_hidden, SequenceLayout layout) {
  // Tied embeddings: rescale before projecting onto the vocabulary (Mesh TensorFlow's convention).
  const torch::Tensor input =
      config_.tie_word_embeddings ? decoder_hidden * std::pow(static_cast<double>(config_.d_model), -0.5)
                                  : decoder_hidden;
  const torch::Tensor& weight = config_.tie_word_embeddings ? shared->weight : lm_head->weight;  // (V / tp, C)
  if (layout == SequenceLayout::kSplit) {
    const WeightGradientSink* sink = config_.tie_word_embeddings ? nullptr : &lm_head->weight_gradient_sink;
    return column_parallel_from_sequence_split(input, {{weight, sink}}, *tp_)[0];
  }
  const torch::Tensor region_input = copy_to_tensor_parallel_region(input, *tp_);
  return config_.tie_word_embeddings ? sinking_linear(region_input, weight, nullptr) : lm_head(region_input);
}

torch::Tensor T5ModelImpl::decode(const torch::Tensor& decoder_input_ids, const torch::Tensor& encoder_output,
                                  const torch::Tensor& attention_mask, SequenceLayout layout) {
  if (layout == SequenceLayout::kSplit) check_sequence_split("target", decoder_input_ids.size(1), tp_->size());
  const torch::Tensor embeddings = shared(decoder_input_ids, layout);
  const auto dtype = embeddings.scalar_type();
  // The encoder output enters the TP region once for all decoder blocks' keys and values: one backward
  // all-reduce (sequence parallelism: one all-gather forward and one reduce-scatter backward), not one per block.
  const torch::Tensor encoder_region = layout == SequenceLayout::kSplit
                                           ? gather_from_sequence_parallel_region(encoder_output, *tp_)
                                           : copy_to_tensor_parallel_region(encoder_output, *tp_);
  const torch::Tensor hidden =
      decoder(embeddings, causal_additive_mask(decoder_input_ids.size(1), dtype, embeddings.device()), encoder_region,
              padding_additive_mask(attention_mask, dtype), layout);
  return lm_logits(hidden, layout);
}

torch::Tensor T5ModelImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                   const torch::Tensor& decoder_input_ids) {
  const SequenceLayout layout = training_layout();
  return decode(decoder_input_ids, encode(input_ids, attention_mask, layout), attention_mask, layout);
}

torch::Tensor T5ModelImpl::token_losses(const torch::Tensor& local_logits, const torch::Tensor& labels) {
  return vocab_parallel_cross_entropy(local_logits, labels, vocab_start(), *tp_);
}

torch::Tensor T5ModelImpl::loss(const Seq2SeqBatch& batch) {
  const torch::Tensor logits = forward(batch.input_ids, batch.attention_mask, shift_right(batch.labels));
  const torch::Tensor counted = (batch.labels != kIgnoreIndex).sum();
  return token_losses(logits, batch.labels).sum() / counted.clamp_min(1).to(torch::kFloat32);
}

torch::Tensor T5ModelImpl::shift_right(const torch::Tensor& labels) const {
  torch::Tensor shifted = torch::empty_like(labels);
  shifted.select(1, 0).fill_(config_.decoder_start_token_id);
  shifted.narrow(1, 1, labels.size(1) - 1).copy_(labels.narrow(1, 0, labels.size(1) - 1));
  return shifted.masked_fill(shifted == kIgnoreIndex, config_.pad_token_id);
}

std::vector<DecoderLayerCache> T5ModelImpl::generation_caches(const torch::Tensor& encoder_output, int64_t copies) {
  std::vector<DecoderLayerCache> caches(decoder->blocks->size());
  for (size_t i = 0; i < caches.size(); ++i) {
    auto block = decoder->blocks[i]->as<T5BlockImpl>();
    auto [key, value] = block->cross_attn->project_key_value(encoder_output);  // (B, Hl, S, D)
    caches[i].cross_key = copies == 1 ? key : key.repeat_interleave(copies, 0);
    caches[i].cross_value = copies == 1 ? value : value.repeat_interleave(copies, 0);
  }
  return caches;
}

torch::Tensor T5ModelImpl::decode_step(const torch::Tensor& last_tokens, int64_t step,
                                       std::vector<DecoderLayerCache>& caches, const torch::Tensor& cross_mask) {
  const auto dtype = caches.front().cross_key.scalar_type();
  // This position attends to itself and every earlier one: no causal mask is needed.
  const torch::Tensor self_bias = decoder->relative_attention_bias(1, step + 1, /*query_offset=*/step).to(dtype);
  torch::Tensor hidden = fused_dropout(shared(last_tokens), decoder->dropout_rate, is_training());
  for (size_t i = 0; i < caches.size(); ++i) {
    hidden = decoder->blocks[i]->as<T5BlockImpl>()->forward_step(hidden, self_bias, caches[i], cross_mask);
  }
  hidden = fused_dropout(decoder->final_norm(hidden), decoder->dropout_rate, is_training());
  return lm_logits(hidden).select(1, 0).to(torch::kFloat32);  // (N, V / tp)
}

torch::Tensor T5ModelImpl::generate_greedy(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                           int64_t max_new_tokens) {
  torch::NoGradGuard no_grad;
  const int64_t batch = input_ids.size(0);
  const torch::Tensor encoder_output = encode(input_ids, attention_mask);
  const torch::Tensor cross_mask = padding_additive_mask(attention_mask, encoder_output.scalar_type());
  std::vector<DecoderLayerCache> caches = generation_caches(encoder_output, 1);

  const auto long_options = input_ids.options().dtype(torch::kLong);
  torch::Tensor sequences = torch::full({batch, 1}, config_.decoder_start_token_id, long_options);
  torch::Tensor unfinished = torch::ones({batch}, long_options);
  for (int64_t step = 0; step < max_new_tokens; ++step) {
    const torch::Tensor logits = decode_step(sequences.narrow(1, step, 1), step, caches, cross_mask);
    torch::Tensor next = vocab_parallel_argmax(logits, vocab_start(), *tp_);
    next = next * unfinished + config_.pad_token_id * (1 - unfinished);
    sequences = torch::cat({sequences, next.unsqueeze(1)}, 1);
    unfinished = unfinished * (next != config_.eos_token_id).to(torch::kLong);
    if (unfinished.max().item<int64_t>() == 0) break;
  }
  return sequences;
}

namespace {

// transformers' stand-in for minus infinity in beam search: a score it adds to what may no longer be chosen.
constexpr double kExcludedScore = -1.0e9;

// tensor (B, K, ...) -> the rows' entries at index (B, N): (B, N, ...).
torch::Tensor gather_beams(const torch::Tensor& tensor, const torch::Tensor& index) {
  torch::Tensor expanded = index;
  while (expanded.dim() < tensor.dim()) expanded = expanded.unsqueeze(-1);
  std::vector<int64_t> shape = tensor.sizes().vec();
  shape[1] = index.size(1);
  return tensor.gather(1, expanded.expand(shape));
}

}  // namespace

torch::Tensor T5ModelImpl::generate_beam(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                         int64_t max_new_tokens, int64_t num_beams, double length_penalty) {
  T5S_CHECK(num_beams >= 1, "beam search needs at least one beam, got ", num_beams);
  T5S_CHECK(max_new_tokens >= 0, "max_new_tokens must be >= 0, got ", max_new_tokens);
  torch::NoGradGuard no_grad;
  const int64_t batch = input_ids.size(0), beams = num_beams;
  const int64_t kept = 2 * beams;  // continuations kept a step: N may end in eos, N others still run on
  const int64_t max_length = 1 + max_new_tokens;
  const auto long_options = input_ids.options().dtype(torch::kLong);
  const auto score_options = input_ids.options().dtype(torch::kFloat32);
  if (max_new_tokens == 0) return torch::full({batch, 1}, config_.decoder_start_token_id, long_options);

  const torch::Tensor encoder_output = encode(input_ids, attention_mask);
  const torch::Tensor beam_mask =
      attention_mask.defined() ? attention_mask.repeat_interleave(beams, 0) : torch::Tensor();  // (B * N, S)
  const torch::Tensor cross_mask = padding_additive_mask(beam_mask, encoder_output.scalar_type());
  std::vector<DecoderLayerCache> caches = generation_caches(encoder_output, beams);

  // Running hypotheses (B, N, 1 + max_new_tokens) with their summed log-probabilities: beam 0 alone at first (the
  // others start excluded, so that the first step does not pick the same token N times).
  torch::Tensor running = torch::full({batch, beams, max_length}, config_.pad_token_id, long_options);
  running.select(2, 0).fill_(config_.decoder_start_token_id);
  torch::Tensor running_scores = torch::zeros({batch, beams}, score_options);
  running_scores.narrow(1, 1, beams - 1).fill_(kExcludedScore);
  // Finished hypotheses (B, N, ...), best first, their length-normalised scores and generated lengths.
  torch::Tensor finished = running.clone();
  torch::Tensor finished_scores = torch::full({batch, beams}, kExcludedScore, score_options);
  torch::Tensor finished_lengths = torch::zeros({batch, beams}, long_options);
  torch::Tensor is_finished = torch::zeros({batch, beams}, long_options.dtype(torch::kBool));
  torch::Tensor improvable = torch::ones({batch, 1}, long_options.dtype(torch::kBool));  // a row still takes some
  const torch::Tensor among_best = torch::arange(kept, long_options) < beams;  // (2N): the best N may finish
  const torch::Tensor beam_of_candidate =
      torch::arange(beams, long_options).view({1, beams, 1}).expand({batch, beams, kept});  // (B, N, 2N)
  const torch::Tensor row_offset = torch::arange(batch, long_options).unsqueeze(1) * beams;  // (B, 1)

  for (int64_t length = 1; length < max_length; ++length) {  // length: tokens in each running hypothesis
    const torch::Tensor last = running.select(2, length - 1).reshape({batch * beams, 1});
    const torch::Tensor logits = decode_step(last, length - 1, caches, cross_mask);  // (B * N, V / tp)
    const torch::Tensor scores =
        vocab_parallel_log_softmax(logits, *tp_).view({batch, beams, -1}) + running_scores.unsqueeze(-1);
    // The 2N best continuations over every beam and token: each beam's own 2N best, then the best of those.
    auto [beam_best, beam_best_ids] = vocab_parallel_topk(scores, kept, vocab_start(), *tp_);  // (B, N, 2N)
    auto [top_scores, pick] = beam_best.reshape({batch, beams * kept}).topk(kept, -1);      // (B, 2N)
    const torch::Tensor top_ids = beam_best_ids.reshape({batch, beams * kept}).gather(1, pick);
    const torch::Tensor top_beams = beam_of_candidate.reshape({batch, beams * kept}).gather(1, pick);
    torch::Tensor top_sequences = gather_beams(running, top_beams);  // (B, 2N, max_length)
    top_sequences.select(2, length).copy_(top_ids);
    // A continuation ends in eos, or at the last length (then all do).
    const torch::Tensor ends =
        length + 1 >= max_length ? torch::ones_like(top_ids, torch::kBool) : top_ids == config_.eos_token_id;

    // The N best that have not ended run on.
    const torch::Tensor open_scores = top_scores + ends.to(torch::kFloat32) * kExcludedScore;
    const torch::Tensor next = std::get<1>(open_scores.topk(beams, -1));  // (B, N)
    running = gather_beams(top_sequences, next);
    running_scores = open_scores.gather(1, next);
    const torch::Tensor source_beams = (top_beams.gather(1, next) + row_offset).reshape({-1});  // (B * N)

    // Those of the best N that ended join the finished ones, scored by length; the N best of both are kept.
    const torch::Tensor ended = ends.logical_and(among_best.unsqueeze(0));
    torch::Tensor ended_scores = top_scores / std::pow(static_cast<double>(length), length_penalty);
    ended_scores = ended_scores + improvable.logical_not().to(torch::kFloat32) * kExcludedScore;
    ended_scores = ended_scores + ended.logical_not().to(torch::kFloat32) * kExcludedScore;
    const torch::Tensor keep = std::get<1>(torch::cat({finished_scores, ended_scores}, 1).topk(beams, -1));
    finished = gather_beams(torch::cat({finished, top_sequences}, 1), keep);
    finished_scores = torch::cat({finished_scores, ended_scores}, 1).gather(1, keep);
    finished_lengths =
        torch::cat({finished_lengths, torch::full({batch, kept}, length, long_options)}, 1).gather(1, keep);
    is_finished = torch::cat({is_finished, ended}, 1).gather(1, keep);

    for (DecoderLayerCache& cache : caches) {
      cache.self_key = cache.self_key.index_select(0, source_beams);
      cache.self_value = cache.self_value.index_select(0, source_beams);
    }
    // A row stops taking hypotheses when it holds N finished ones and its best running hypothesis, at the length
    // reached, scores no better than the worst of them (transformers' rule with early_stopping=False).
    const torch::Tensor best_running =
        running_scores.narrow(1, 0, 1) / std::pow(static_cast<double>(length), length_penalty);
    const torch::Tensor worst_finished =
        torch::where(is_finished, std::get<0>(finished_scores.min(1, /*keepdim=*/true)),
                     torch::full({}, kExcludedScore, score_options));
    improvable = improvable.logical_and((best_running > worst_finished).any(-1, /*keepdim=*/true));
    if (!improvable.any().item<bool>() || ends.all().item<bool>()) break;
  }
  const torch::Tensor generated = finished_lengths.select(1, 0);  // (B)
  return finished.select(1, 0).narrow(1, 0, 1 + generated.max().item<int64_t>()).contiguous();
}

std::vector<ParameterLayout> T5ModelImpl::parameter_layouts() {
  std::vector<ParameterLayout> layouts;
  for (const auto& item : named_modules()) {
    const auto* sharded = dynamic_cast<const ShardedModule*>(item.value().get());
    if (sharded == nullptr) continue;
    for (ParameterLayout layout : sharded->parameter_layouts()) {
      layout.name = item.key().empty() ? layout.name : item.key() + "." + layout.name;
      layouts.push_back(std::move(layout));
    }
  }
  return layouts;
}

namespace {

// The standard deviation Hugging Face's T5 initialises each parameter with (see T5PreTrainedModel._init_weights).
double init_std(const ModelConfig& c, const std::string& name) {
  auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  const double f = c.initializer_factor;
  const double d_model = static_cast<double>(c.d_model);
  if (name == "shared.weight" || name == "lm_head.weight") return f * 1.0;
  if (ends_with("relative_attention_bias.weight")) return f * std::pow(d_model, -0.5);
  if (ends_with(".q.weight")) return f * std::pow(d_model * static_cast<double>(c.d_kv), -0.5);
  if (ends_with(".k.weight") || ends_with(".v.weight")) return f * std::pow(d_model, -0.5);
  if (ends_with(".o.weight")) return f * std::pow(static_cast<double>(c.inner_dim()), -0.5);
  if (ends_with(".wi.weight") || ends_with(".wi_0.weight") || ends_with(".wi_1.weight")) {
    return f * std::pow(d_model, -0.5);
  }
  if (ends_with(".wo.weight")) return f * std::pow(static_cast<double>(c.d_ff), -0.5);
  throw Error(msg("no initialisation rule for parameter ", name));
}

// This rank's shard of a parameter's initial values, N(0, std). Every slice along the split dimension (dim 0 for
// a replicated tensor) comes from a generator of its own, seeded by the run's seed, the parameter's name and the
// slice's index in the full tensor: a rank draws only the slices it holds (a T5-XXL rank at tp 8 draws 1.4 billion
// samples, not 11 billion), and the shards of every TP size put together are the tensor one rank draws.
torch::Tensor draw_normal_shard(const ParameterLayout& layout, double std, uint64_t seed, int tp_rank, int tp_size) {
  const int64_t slice_dim = layout.is_split() ? layout.split_dim : 0;
  const auto [offset, length] = shard_range(layout, tp_rank, tp_size);
  std::vector<int64_t> slices_first = layout.full_shape;  // the slice dimension moved to the front
  slices_first.erase(slices_first.begin() + slice_dim);
  slices_first.insert(slices_first.begin(), length);
  torch::Tensor shard = torch::empty(slices_first, torch::kFloat32);
  for (int64_t i = 0; i < length; ++i) {
    const uint64_t slice_seed = seed ^ fnv1a_64(layout.name + "[" + std::to_string(offset + i) + "]");
    shard[i].normal_(0.0, std, at::make_generator<at::CPUGeneratorImpl>(slice_seed));
  }
  return shard.movedim(0, slice_dim).contiguous();
}

}  // namespace

void T5ModelImpl::initialize_weights(uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto params = named_parameters();
  for (const ParameterLayout& layout : parameter_layouts()) {
    torch::Tensor param = params[layout.name];
    if (param.device().is_meta()) continue;
    if (layout.name.find("norm") != std::string::npos) {
      param.fill_(config_.initializer_factor);
    } else {
      param.copy_(draw_normal_shard(layout, init_std(config_, layout.name), seed, tp_->rank(), tp_->size()));
    }
  }
}

}  // namespace t5scale
