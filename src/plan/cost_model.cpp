#include "plan/cost_model.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/check.h"
#include "core/units.h"

namespace t5scale {

namespace {

// Forward FLOPs of one row's attention cores, scores (q k^T) and weighted values (p v): an encoder block's over s
// source tokens; a decoder block's self-attention over t keys and cross-attention over s keys.
double encoder_core_flops(const ModelConfig& m, double s) {
  return s * 2.0 * 2.0 * s * static_cast<double>(m.inner_dim());
}
double decoder_core_flops(const ModelConfig& m, double s, double t) {
  return t * 2.0 * 2.0 * (t + s) * static_cast<double>(m.inner_dim());
}

// Per token: one projection of d_model onto the heads (or back), and the feed-forward (two or three matrices).
double projection_flops(const ModelConfig& m) {
  return 2.0 * static_cast<double>(m.d_model) * static_cast<double>(m.inner_dim());
}
double feed_forward_flops(const ModelConfig& m) {
  const double ff_inputs = m.feed_forward == FeedForwardKind::kGatedGelu ? 2.0 : 1.0;
  return 2.0 * (ff_inputs + 1.0) * static_cast<double>(m.d_model) * static_cast<double>(m.d_ff);
}

// Forward FLOPs of one row's encoder block (per source token: q, k, v, o, attention core over s keys,
// feed-forward) and decoder block (per target token: self-attention over t keys, cross-attention with q and o on
// target tokens and k and v on every source token, over s keys, feed-forward).
double encoder_block_flops(const ModelConfig& m, double s) {
  return s * (4.0 * projection_flops(m) + feed_forward_flops(m)) + encoder_core_flops(m, s);
}
double decoder_block_flops(const ModelConfig& m, double s, double t) {
  return t * (6.0 * projection_flops(m) + feed_forward_flops(m)) + s * 2.0 * projection_flops(m) +
         decoder_core_flops(m, s, t);
}

// Forward FLOPs of one example with source length s and target length t (forward_flops' terms per row).
double example_forward_flops(const ModelConfig& m, double s, double t) {
  const double lm_head = t * 2.0 * static_cast<double>(m.d_model) * static_cast<double>(m.vocab_size);
  return static_cast<double>(m.num_layers) * encoder_block_flops(m, s) +
         static_cast<double>(m.num_decoder_layers) * decoder_block_flops(m, s, t) + lm_head;
}

}  // namespace

double forward_flops(const ModelConfig& m, const BatchShape& batch) {
  T5S_CHECK(batch.rows > 0 && batch.source_length > 0 && batch.target_length > 0,
            "a batch shape needs positive rows and lengths, got ", batch.rows, " x (", batch.source_length, ", ",
            batch.target_length, ")");
  return static_cast<double>(batch.rows) * example_forward_flops(m, static_cast<double>(batch.source_length),
                                                                 static_cast<double>(batch.target_length));
}

double training_flops(const ModelConfig& model, const BatchShape& batch) { return 3.0 * forward_flops(model, batch); }

double unpadded_training_flops(const ModelConfig& model, const std::vector<int64_t>& source_lengths,
                               const std::vector<int64_t>& target_lengths) {
  T5S_CHECK(source_lengths.size() == target_lengths.size(), "unpadded_training_flops: ", source_lengths.size(),
            " source lengths and ", target_lengths.size(), " target lengths");
  double total = 0.0;
  for (size_t i = 0; i < source_lengths.size(); ++i) {
    T5S_CHECK(source_lengths[i] >= 0 && target_lengths[i] >= 0, "unpadded_training_flops: example ", i,
              " has lengths ", source_lengths[i], " and ", target_lengths[i]);
    total += example_forward_flops(model, static_cast<double>(source_lengths[i]),
                                   static_cast<double>(target_lengths[i]));
  }
  return 3.0 * total;
}

int64_t parameters_per_rank(const ModelConfig& c, int tp) {
  int64_t total = 0;
  for (const ParameterElements& p : parameter_elements(c, tp)) total += p.per_rank;
  return total;
}

int64_t frozen_parameters_per_rank(const ModelConfig& c, int tp, const FreezeOptions& freeze) {
  const std::vector<ParameterElements> elements = parameter_elements(c, tp);
  std::vector<std::string> names;
  for (const ParameterElements& p : elements) names.push_back(p.name);
  const std::vector<std::string> frozen = frozen_parameter_names(names, freeze);
  int64_t total = 0;
  for (const ParameterElements& p : elements) {
    if (std::find(frozen.begin(), frozen.end(), p.name) != frozen.end()) total += p.per_rank;
  }
  return total;
}

namespace {

// The bytes one micro-batch's step holds beyond the weights, gradients and optimizer state, at the moment of the
// step where they peak. Each term is a tensor the code keeps (saved for backward, or held by the step) or makes at
// that moment, per rank; t5scale-bench measures the same on the CPU (CpuMemoryTracker, unit.memory_model). The
// moments: the loss's softmax at the end of the forward; its backward; the LM head's backward; the first
// recomputation of a checkpointed block; the backward of the embeddings, where the embedding's dense gradients
// meet; the optimizer's largest temporary.
class StepActivations {
 public:
  StepActivations(const ModelConfig& c, const MemoryInputs& in)
      : e_(static_cast<double>(in.compute_bytes_per_element)),
        rows_(static_cast<double>(in.micro_batch.rows)),
        source_(static_cast<double>(in.micro_batch.source_length)),
        target_(static_cast<double>(in.micro_batch.target_length)),
        d_model_(static_cast<double>(c.d_model)),
        heads_(static_cast<double>(c.num_heads / in.tp)),
        inner_(static_cast<double>(c.inner_dim() / in.tp)),
        d_ff_(static_cast<double>(c.d_ff / in.tp)),
        vocab_(static_cast<double>(c.vocab_size / in.tp)),
        // Sequence parallelism: the share of a micro-batch's tokens a rank holds between the TP regions.
        split_(in.sequence_parallel ? static_cast<double>(in.tp) : 1.0),
        dropout_(c.dropout_rate > 0.0),
        gated_(c.feed_forward == FeedForwardKind::kGatedGelu),
        tied_(c.tie_word_embeddings),
        on_gpu_(in.on_gpu),
        fused_norms_(in.on_gpu),
        fused_attention_(in.on_gpu && in.fused_attention),
        padded_(in.padded),
        product_buffer_(!in.on_gpu && in.compute_bytes_per_element == 2 && in.half_products_through_fp32 ? 4.0 : 0.0),
        // A dropout's mask: one byte per element (at::native_dropout, on every device).
        mask_(dropout_ ? 1.0 : 0.0),
        every_(in.checkpoint_every_blocks),
        selective_(in.selective_recomputation),
        encoder_blocks_(c.num_layers),
        decoder_blocks_(c.num_decoder_layers) {}

  double peak() const {
    const double encoder = stack_level(source_, /*lm_head_input=*/false) +
                           kept(encoder_blocks_, encoder_block(), source_tokens(), encoder_blocks_);
    const double decoder = stack_level(target_, /*lm_head_input=*/true) +
                           kept(decoder_blocks_, decoder_block(), target_tokens(), decoder_blocks_);
    const double saved = encoder + decoder;
    const double logits = target_tokens() * vocab_;                // (B T, V / tp)
    const double embedding = vocab_ * d_model_;                    // (V / tp, d_model)
    const double held_grad = tied_ ? e_ * embedding : 0.0;         // the LM head's part of the tied gradient
    const double fp32_grad_to_input = e_ == 2.0 ? 2.0 : 0.0;       // the loss gradient cast back to bf16
    // A gradient added into its fp32 bucket: the gradient, and from bf16 its fp32 copy (on the CPU: the GEMM's own
    // fp32 buffer where it has one).
    const double accumulated =
        (e_ + (e_ == 2.0 ? (on_gpu_ ? 4.0 : product_buffer_) : 0.0)) * embedding;
    double peak = std::max({
        // The loss: logits (held by the step), the max-shifted fp32 logits, their exponentials and the softmax.
        saved + (e_ + 12.0) * logits,
        // Its backward: the softmax's copy, the gradient and its cast, beside the logits and the saved softmax.
        saved + (e_ + 12.0 + fp32_grad_to_input) * logits,
        // The LM head's backward: the logits' gradient and the weight's (tied: held for the embeddings' parts;
        // untied: added into its bucket).
        saved + 2.0 * e_ * logits + (tied_ ? (e_ + product_buffer_) * embedding : accumulated),
        // The last decoder block's backward: its attention gradients over the widest scores (and the core made again
        // under selective recomputation).
        saved + e_ * logits + held_grad + 2.0 * e_ * decoder_scores() +
            recomputed_core(target_, std::max(target_, source_)),
        // The decoder embedding's backward, with the encoder's activations still kept: its dense gradient (and,
        // tied, the LM head's part that .grad holds, which sinking_linear makes in the weight's layout: no copy).
        encoder + (tied_ ? 2.0 : 1.0) * e_ * embedding,
        // The encoder embedding's: its gradient and the one held for it; then their sum added into its bucket.
        std::max(2.0 * e_ * embedding, accumulated),
        // The optimizer: one fp32 temporary of the largest parameter.
        4.0 * embedding,
    });
    if (every_ > 0) {
      // The first recomputation in each stack: its last checkpointed block, with the blocks before it kept and the
      // block's activations and attention gradients made again.
      const int64_t last_encoder = (encoder_blocks_ - 1) / every_ * every_;
      const int64_t last_decoder = (decoder_blocks_ - 1) / every_ * every_;
      const double decoder_recompute = encoder + stack_level(target_, true) +
                                       kept(decoder_blocks_, decoder_block(), target_tokens(), last_decoder) +
                                       e_ * residual(target_tokens()) * d_model_ + decoder_block() +
                                       2.0 * e_ * decoder_scores() +
                                       recomputed_core(target_, std::max(target_, source_));
      const double encoder_recompute = stack_level(source_, false) +
                                       kept(encoder_blocks_, encoder_block(), source_tokens(), last_encoder) +
                                       2.0 * e_ * residual(source_tokens()) * d_model_ + encoder_block() +
                                       2.0 * e_ * encoder_scores() + recomputed_core(source_, source_);
      peak = std::max(peak, e_ * logits + held_grad + std::max(decoder_recompute, encoder_recompute));
    }
    return peak;
  }

 private:
  double source_tokens() const { return rows_ * source_; }
  double target_tokens() const { return rows_ * target_; }
  double encoder_scores() const { return rows_ * heads_ * source_ * source_; }
  double decoder_scores() const { return rows_ * heads_ * target_ * std::max(target_, source_); }
  // Of `tokens`, those a rank holds in the residual stream: all, or 1 / tp under sequence parallelism.
  double residual(double tokens) const { return tokens / split_; }

  // RMSNorm over `tokens`, besides its input: its output; fused (at::rms_norm on the GPU) an fp32 rstd per token; on
  // the CPU, where at::rms_norm is a composite, what a block is measured to keep of it: the normalised values and,
  // from bf16, an fp32 copy of the input.
  double norm(double tokens) const {
    if (fused_norms_) return e_ * tokens * d_model_ + 4.0 * tokens;
    return ((e_ == 2.0 ? 4.0 : 0.0) + 2.0 * e_) * tokens * d_model_;
  }

  // One attention's saved tensors for `queries` x `keys` tokens per row, besides its normed input: q, k, v and the
  // heads' context for the output projection, and what its core keeps (none under selective recomputation). A fused
  // kernel writes its output in the (B, T, H, D) layout already, so the context is that same tensor (its
  // contiguous() a view): counted once, the kernel adding only its log-sum-exp.
  double attention(double queries, double keys) const {
    const double q = e_ * rows_ * queries * inner_, kv = 2.0 * e_ * rows_ * keys * inner_;
    const double context = e_ * rows_ * queries * inner_;
    if (selective_) return q + kv + context;
    if (fused_attention_) return q + kv + core(queries, keys);
    return q + kv + context + core(queries, keys);
  }

  // What an attention core keeps for backward: explicitly (the CPU, or a GPU's explicit path) the fp32 softmax, the
  // dropout's mask and the dropped weights (the bf16 weights without dropout); fused (SDPA on the GPU) its output and
  // log-sum-exp.
  double core(double queries, double keys) const {
    if (fused_attention_) return e_ * rows_ * queries * inner_ + 4.0 * rows_ * heads_ * queries;
    // The fp32 softmax; then what the product with v keeps: the dropped weights (and the mask), else the weights
    // cast to bf16 (in fp32 the softmax itself).
    const double per_score = 4.0 + (dropout_ ? mask_ + e_ : e_ == 2.0 ? e_ : 0.0);
    return per_score * rows_ * heads_ * queries * keys;
  }

  // Under selective recomputation, the widest core of a stack made again for its backward (none otherwise).
  double recomputed_core(double queries, double keys) const { return selective_ ? core(queries, keys) : 0.0; }

  // The feed-forward's saved tensors: relu's output; gated GELU both projections and the GELU; then the input of
  // the output projection (with dropout: its mask and the dropped values; else relu's output itself, or the product).
  double feed_forward(double tokens) const {
    const double per_token = gated_ ? 3.0 * e_ + (dropout_ ? mask_ + e_ : e_) : e_ + (dropout_ ? mask_ + e_ : 0.0);
    return per_token * tokens * d_ff_;
  }

  // A sub-layer around `inner`: its input (the residual stream), its norm (whose output the projections keep; under
  // sequence parallelism they keep the split and all-gather it again in backward), and the residual dropout's mask.
  double sub_layer(double tokens, double inner) const {
    const double held = residual(tokens);
    return e_ * held * d_model_ + norm(held) + inner + mask_ * held * d_model_;
  }

  double encoder_block() const {
    const double tokens = source_tokens();
    return sub_layer(tokens, attention(source_, source_)) + sub_layer(tokens, feed_forward(tokens));
  }

  double decoder_block() const {
    const double tokens = target_tokens();
    return sub_layer(tokens, attention(target_, target_)) + sub_layer(tokens, attention(target_, source_)) +
           sub_layer(tokens, feed_forward(tokens));
  }

  // What blocks 0 .. upto-1 of a stack keep: a checkpointed block (0, k, 2k, ...) its input, the others everything.
  double kept(int64_t blocks, double per_block, double tokens, int64_t upto) const {
    double total = 0.0;
    for (int64_t i = 0; i < std::min(upto, blocks); ++i) {
      total += every_ > 0 && i % every_ == 0 ? e_ * residual(tokens) * d_model_ : per_block;
    }
    return total;
  }

  // Around a stack's blocks: the embedding's dropout mask, the final norm and its dropout, the output (and the LM
  // head's scaled input for the decoder); fused attention keeps the stack's position bias, saved by every block.
  // Under sequence parallelism all but the encoder's output are split: the decoder's cross-attention keeps that
  // all-gathered, whole.
  double stack_level(double length, bool lm_head_input) const {
    const double tokens = rows_ * length, held = residual(tokens);
    double bytes = 2.0 * mask_ * held * d_model_ + e_ * (lm_head_input ? held : tokens) * d_model_ + norm(held) +
                   (lm_head_input ? e_ * held * d_model_ : 0.0);
    if (fused_attention_) {
      // The encoder's bias carries the padding mask of each row, (B, H, S, S), where a row is padded; the decoder's,
      // and the encoder's of a batch without padding, are (1, H, L, L).
      bytes += e_ * heads_ * length * length * (lm_head_input || !padded_ ? 1.0 : rows_);
    }
    return bytes;
  }

  double e_, rows_, source_, target_, d_model_, heads_, inner_, d_ff_, vocab_, split_;
  bool dropout_, gated_, tied_, on_gpu_, fused_norms_, fused_attention_, padded_;
  double product_buffer_;  // bytes per element of a half-precision product's fp32 buffer on the CPU (4 or 0)
  double mask_;
  int64_t every_;
  bool selective_;
  int64_t encoder_blocks_, decoder_blocks_;
};

}  // namespace

MemoryPrediction predict_memory(const ModelConfig& c, const MemoryInputs& in) {
  T5S_CHECK(in.tp >= 1 && in.dp >= 1, "tp and dp must be at least 1, got ", in.tp, " and ", in.dp);
  T5S_CHECK(in.compute_bytes_per_element == 2 || in.compute_bytes_per_element == 4,
            "compute bytes per element must be 2 or 4, got ", in.compute_bytes_per_element);
  T5S_CHECK(in.micro_batch.rows > 0 && in.micro_batch.source_length > 0 && in.micro_batch.target_length > 0,
            "a micro-batch needs positive rows and lengths, got ", in.micro_batch.rows, " x (",
            in.micro_batch.source_length, ", ", in.micro_batch.target_length, ")");
  MemoryPrediction p;
  const int64_t all = parameters_per_rank(c, in.tp);
  T5S_CHECK(in.frozen_parameters_per_rank >= 0 && in.frozen_parameters_per_rank < all, "frozen parameters (",
            in.frozen_parameters_per_rank, ") must be fewer than the rank's ", all);
  const int64_t n = all - in.frozen_parameters_per_rank;  // trained: gradients and optimizer state
  const int64_t e = in.compute_bytes_per_element;
  p.parameters_per_rank = all;
  // fp32 training without ZeRO-1: the trained parameters are the fp32 master weights themselves
  // (DistributedOptimizer makes them views of its buckets), counted in optimizer_bytes below, not twice; frozen
  // parameters have no master and are held as they are.
  const bool parameters_are_masters = e == 4 && !in.zero1 && !in.offload_optimizer;
  p.weights_bytes = parameters_are_masters ? in.frozen_parameters_per_rank * e : all * e;
  T5S_CHECK(!in.zero2 || in.zero1, "ZeRO-2 needs ZeRO-1");
  T5S_CHECK(in.bucket_bytes > 0, "bucket bytes must be positive, got ", in.bucket_bytes);
  // fp32 gradient buckets: whole (with ZeRO-1 also this rank's reduced chunk); under ZeRO-2 this rank's chunk and
  // the whole buckets being filled or reduced. A parameter's own .grad is released into its bucket as soon as it
  // is made, so it counts with the step's transients, not here.
  const int64_t shard = in.zero1 ? (n + in.dp - 1) / in.dp : n;
  const int64_t fp32_gradient_elements =
      in.zero2 ? shard + std::min<int64_t>(n, kZero2BucketsHeld * in.bucket_bytes / 4) : in.zero1 ? n + shard : n;
  p.gradients_bytes = fp32_gradient_elements * 4;
  if (in.adafactor) {
    // fp32 master weights, plus factored moments: one row and one column vector per matrix, a full vector for
    // the norms; bounded above by 1/64 of the parameters for T5's shapes, counted as such.
    p.optimizer_bytes = n * 4 + n * 4 / 64;
  } else {
    // Master weights, first and second moments, and the weight-decay mask (a byte per element).
    p.optimizer_bytes = shard * (4 * 3 + 1);
  }
  if (in.offload_optimizer && in.on_gpu) {
    // The same state on the host, beside the owned gradients' host copy and the weights' pinned staging.
    p.host_bytes = p.optimizer_bytes + shard * 4 + shard * e;
    p.optimizer_bytes = 0;
  } else if (in.offload_optimizer) {
    // On the CPU the host is the device: the state stays where it is counted, the gradients' copy beside it.
    p.gradients_bytes += shard * 4;
  }
  T5S_CHECK(in.checkpoint_every_blocks >= 0, "checkpoint_every_blocks must be >= 0, got ", in.checkpoint_every_blocks);
  p.activations_bytes = static_cast<int64_t>(StepActivations(c, in).peak());
  p.workspace_bytes = in.on_gpu ? int64_t{1536} * 1024 * 1024 : 0;
  return p;
}

// namespace

bool fits_device_memory(int64_t bytes, int64_t device_memory_bytes) {
  return device_memory_bytes > 0 &&
         static_cast<double>(bytes) <= kUsableMemoryFraction * static_cast<double>(device_memory_bytes);
}

CheckpointingChoice choose_activation_checkpointing(const ModelConfig& model, const MemoryInputs& inputs,
                                                    int64_t device_memory_bytes) {
  T5S_CHECK(device_memory_bytes > 0, "device memory must be positive, got ", device_memory_bytes, " bytes");
  // (checkpoint_every_blocks, selective) in order of recomputed FLOPs; at equal FLOPs in this order.
  std::vector<std::pair<int64_t, bool>> candidates{{0, false}, {0, true}};
  for (int64_t k = std::max(model.num_layers, model.num_decoder_layers); k >= 1; --k) candidates.push_back({k, false});
  auto flops = [&](const std::pair<int64_t, bool>& candidate) {
    MemoryInputs tried = inputs;
    tried.checkpoint_every_blocks = candidate.first;
    tried.selective_recomputation = candidate.second;
    return recomputed_flops(model, tried);
  };
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](const auto& a, const auto& b) { return flops(a) < flops(b); });
  CheckpointingChoice choice;
  for (const auto& [k, selective] : candidates) {
    MemoryInputs tried = inputs;
    tried.checkpoint_every_blocks = k;
    tried.selective_recomputation = selective;
    choice.checkpoint_every_blocks = k;
    choice.selective_recomputation = selective;
    choice.memory = predict_memory(model, tried);
    choice.fits = fits_device_memory(choice.memory.total_bytes(), device_memory_bytes);
    if (choice.fits) return choice;
  }
  // Nothing fits: every block, the least memory of the candidates.
  MemoryInputs every = inputs;
  every.checkpoint_every_blocks = 1;
  every.selective_recomputation = false;
  choice.checkpoint_every_blocks = 1;
  choice.selective_recomputation = false;
  choice.memory = predict_memory(model, every);
  choice.fits = false;
  return choice;
}

double recomputed_flops(const ModelConfig& model, const MemoryInputs& inputs) {
  const double rows = static_cast<double>(inputs.micro_batch.rows);
  const double s = static_cast<double>(inputs.micro_batch.source_length);
  const double t = static_cast<double>(inputs.micro_batch.target_length);
  double per_row = 0.0;
  if (inputs.checkpoint_every_blocks > 0) {
    const int64_t k = inputs.checkpoint_every_blocks;
    auto checkpointed = [k](int64_t blocks) { return static_cast<double>((blocks + k - 1) / k); };
    per_row += checkpointed(model.num_layers) * encoder_block_flops(model, s) +
               checkpointed(model.num_decoder_layers) * decoder_block_flops(model, s, t);
  }
  if (inputs.selective_recomputation) {
    per_row += static_cast<double>(model.num_layers) * encoder_core_flops(model, s) +
               static_cast<double>(model.num_decoder_layers) * decoder_core_flops(model, s, t);
  }
  return rows * per_row;
}

CheckpointingChoice resolve_activation_checkpointing(const ModelConfig& model, const MemoryInputs& inputs,
                                                     int64_t device_memory_bytes) {
  T5S_CHECK(inputs.checkpoint_every_blocks >= kChooseCheckpointing,
            "checkpoint_every_blocks must be at least 0, or the planner's choice, got ", inputs.checkpoint_every_blocks);
  if (inputs.checkpoint_every_blocks == kChooseCheckpointing && device_memory_bytes > 0) {
    return choose_activation_checkpointing(model, inputs, device_memory_bytes);
  }
  CheckpointingChoice given;
  given.checkpoint_every_blocks = std::max<int64_t>(inputs.checkpoint_every_blocks, 0);
  given.selective_recomputation = inputs.selective_recomputation;
  MemoryInputs with_it = inputs;
  with_it.checkpoint_every_blocks = given.checkpoint_every_blocks;
  given.memory = predict_memory(model, with_it);
  given.fits = device_memory_bytes <= 0 || fits_device_memory(given.memory.total_bytes(), device_memory_bytes);
  return given;
}

std::string CheckpointingChoice::describe_against(int64_t device_memory_bytes) const {
  char figures[96];
  std::snprintf(figures, sizeof(figures), "predicted %.2f GiB of %.2f GiB",
                bytes_to_gib(static_cast<double>(memory.total_bytes())), bytes_to_gib(static_cast<double>(device_memory_bytes)));
  return msg(describe(), " (", figures, fits ? ")" : "; does not fit)");
}

std::string CheckpointingChoice::describe() const {
  const int64_t k = checkpoint_every_blocks;
  const std::string selective = "selective (attention cores)";
  if (k == 0) return selective_recomputation ? selective : "none";
  const bool teen = k % 100 >= 11 && k % 100 <= 13;
  const char* suffix = teen ? "th" : k % 10 == 1 ? "st" : k % 10 == 2 ? "nd" : k % 10 == 3 ? "rd" : "th";
  const std::string blocks = k == 1 ? "every block" : msg("every ", k, suffix, " block");
  return selective_recomputation ? blocks + " and " + selective : blocks;
}

std::string MemoryPrediction::describe() const {
  auto gib = [](int64_t bytes) { return gib_text(static_cast<double>(bytes)); };
  return msg("weights ", gib(weights_bytes), " + gradients ", gib(gradients_bytes), " + optimizer ",
             gib(optimizer_bytes), " + activations ", gib(activations_bytes), " + workspace ", gib(workspace_bytes),
             " = ", gib(total_bytes()), host_bytes > 0 ? msg(", host ", gib(host_bytes)) : std::string());
}

}  // namespace t5scale
