#include "plan/cost_model.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/check.h"

namespace t5scale {

double forward_flops(const ModelConfig& m, const BatchShape& batch) {
  T5S_CHECK(batch.rows > 0 && batch.source_length > 0 && batch.target_length > 0,
            "a batch shape needs positive rows and lengths, got ", batch.rows, " x (", batch.source_length, ", ",
            batch.target_length, ")");
  const double b = static_cast<double>(batch.rows);
  const double s = static_cast<double>(batch.source_length), t = static_cast<double>(batch.target_length);
  const double d = static_cast<double>(m.d_model), inner = static_cast<double>(m.inner_dim());
  const double ff_inputs = m.feed_forward == FeedForwardKind::kGatedGelu ? 2.0 : 1.0;
  const double feed_forward_per_token = 2.0 * (ff_inputs + 1.0) * d * static_cast<double>(m.d_ff);
  const double projections_per_token = 2.0 * 4.0 * d * inner;  // q, k, v, o

  // Encoder block, per source token: projections, scores (q k^T) and weighted values (p v) over s keys.
  const double encoder_block = s * (projections_per_token + 2.0 * 2.0 * s * inner + feed_forward_per_token);
  // Decoder block, per target token: self-attention over t keys, cross-attention (q and o on target tokens, k and
  // v on every source token) over s keys, feed-forward.
  const double decoder_block = t * (projections_per_token + 2.0 * 2.0 * t * inner) +
                               t * (2.0 * 2.0 * d * inner + 2.0 * 2.0 * s * inner) + s * (2.0 * 2.0 * d * inner) +
                               t * feed_forward_per_token;
  const double lm_head = t * 2.0 * d * static_cast<double>(m.vocab_size);
  return b * (static_cast<double>(m.num_layers) * encoder_block +
              static_cast<double>(m.num_decoder_layers) * decoder_block + lm_head);
}

double training_flops(const ModelConfig& model, const BatchShape& batch) { return 3.0 * forward_flops(model, batch); }

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

MemoryPrediction predict_memory(const ModelConfig& c, const MemoryInputs& in) {
  T5S_CHECK(in.tp >= 1 && in.dp >= 1, "tp and dp must be at least 1, got ", in.tp, " and ", in.dp);
  T5S_CHECK(in.compute_bytes_per_element == 2 || in.compute_bytes_per_element == 4,
            "compute bytes per element must be 2 or 4, got ", in.compute_bytes_per_element);
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
  const bool parameters_are_masters = e == 4 && !in.zero1;
  p.weights_bytes = parameters_are_masters ? in.frozen_parameters_per_rank * e : all * e;
  T5S_CHECK(!in.zero2 || in.zero1, "ZeRO-2 needs ZeRO-1");
  T5S_CHECK(in.bucket_bytes > 0, "bucket bytes must be positive, got ", in.bucket_bytes);
  // fp32 buckets (ZeRO-2: this rank's chunk of every bucket, and the whole buckets being filled or reduced), and
  // each trained parameter's .grad in the compute dtype.
  const int64_t fp32_gradient_elements =
      in.zero2 ? (n + in.dp - 1) / in.dp + std::min<int64_t>(n, kZero2BucketsHeld * in.bucket_bytes / 4) : n;
  p.gradients_bytes = fp32_gradient_elements * 4 + n * e;
  if (in.adafactor) {
    // fp32 master weights, plus factored moments: one row and one column vector per matrix, a full vector for
    // the norms; bounded above by 1/64 of the parameters for T5's shapes, counted as such.
    p.optimizer_bytes = n * 4 + n * 4 / 64;
  } else {
    const int64_t shard = in.zero1 ? (n + in.dp - 1) / in.dp : n;
    p.optimizer_bytes = shard * 4 * 3;  // master weights, first and second moments
  }

  // Activations saved for backward, in the compute dtype, per token of one micro-batch. For a block with hidden
  // size h, TP size t, heads a, and sequence length L: about L*b*h*(10 + 24/t) bytes for 2-byte activations plus
  // 5*a*L^2*b/t for the attention scores, softmax and dropout mask (Korthikanti et al., 2022, eq. 2); T5's
  // feed-forward width and head size enter through the 24/t term scaled by d_ff / (4 h) and inner / h.
  const double b = static_cast<double>(in.micro_batch.rows);
  const double h = static_cast<double>(c.d_model), t = static_cast<double>(in.tp);
  const double a = static_cast<double>(c.num_heads);
  const double scale = static_cast<double>(e) / 2.0;
  auto block_bytes = [&](double length, double attention_keys, int attentions) {
    const double ff_factor = static_cast<double>(c.d_ff) / (4.0 * h);
    const double inner_factor = static_cast<double>(c.inner_dim()) / h;
    const double linear = length * b * h * (10.0 + (8.0 * inner_factor * attentions + 16.0 * ff_factor) / t);
    const double scores = 5.0 * a * length * attention_keys * b / t * attentions;
    return scale * (linear + scores);
  };
  const double s = static_cast<double>(in.micro_batch.source_length);
  const double tl = static_cast<double>(in.micro_batch.target_length);
  const double encoder_block = block_bytes(s, s, 1);
  // Decoder blocks attend to themselves and to the encoder output; average the key lengths of the two.
  const double decoder_block = block_bytes(tl, (tl + s) / 2.0, 2);
  const double logits = b * tl * static_cast<double>(c.vocab_size) / t * 4.0 * 2.0;  // fp32 logits and their grad
  // A checkpointed block keeps only its input; during its recomputation one block's activations exist at a time.
  // Blocks 0, k, 2k, ... of each stack are checkpointed (the model's rule), the others keep everything.
  T5S_CHECK(in.checkpoint_every_blocks >= 0, "checkpoint_every_blocks must be >= 0, got ", in.checkpoint_every_blocks);
  const int64_t k = in.checkpoint_every_blocks;
  auto checkpointed_of = [k](int64_t blocks) { return k > 0 ? (blocks + k - 1) / k : int64_t{0}; };
  const int64_t encoder_checkpointed = checkpointed_of(c.num_layers);
  const int64_t decoder_checkpointed = checkpointed_of(c.num_decoder_layers);
  double activations = encoder_block * static_cast<double>(c.num_layers - encoder_checkpointed) +
                       decoder_block * static_cast<double>(c.num_decoder_layers - decoder_checkpointed);
  if (k > 0) {
    activations += e * b * h * (s * static_cast<double>(encoder_checkpointed) +
                                tl * static_cast<double>(decoder_checkpointed)) +
                   std::max(encoder_block, decoder_block);
  }
  p.activations_bytes = static_cast<int64_t>(activations + logits);
  p.workspace_bytes = in.on_gpu ? int64_t{1536} * 1024 * 1024 : 0;
  return p;
}

namespace {
// The share of a device's memory a prediction may fill: the rest for allocator fragmentation the model does not see.
constexpr double kUsableMemoryFraction = 0.95;
}  // namespace

CheckpointingChoice choose_activation_checkpointing(const ModelConfig& model, const MemoryInputs& inputs,
                                                    int64_t device_memory_bytes) {
  T5S_CHECK(device_memory_bytes > 0, "device memory must be positive, got ", device_memory_bytes, " bytes");
  const double budget = kUsableMemoryFraction * static_cast<double>(device_memory_bytes);
  std::vector<int64_t> candidates{0};
  for (int64_t k = std::max(model.num_layers, model.num_decoder_layers); k >= 1; --k) candidates.push_back(k);
  CheckpointingChoice choice;
  for (const int64_t k : candidates) {
    MemoryInputs tried = inputs;
    tried.checkpoint_every_blocks = k;
    choice.checkpoint_every_blocks = k;
    choice.memory = predict_memory(model, tried);
    choice.fits = static_cast<double>(choice.memory.total_bytes()) <= budget;
    if (choice.fits) break;
  }
  return choice;
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
  MemoryInputs with_it = inputs;
  with_it.checkpoint_every_blocks = given.checkpoint_every_blocks;
  given.memory = predict_memory(model, with_it);
  given.fits = device_memory_bytes <= 0 ||
               static_cast<double>(given.memory.total_bytes()) <= kUsableMemoryFraction * static_cast<double>(device_memory_bytes);
  return given;
}

std::string CheckpointingChoice::describe_against(int64_t device_memory_bytes) const {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  char figures[96];
  std::snprintf(figures, sizeof(figures), "predicted %.2f GiB of %.2f GiB",
                static_cast<double>(memory.total_bytes()) / kGiB, static_cast<double>(device_memory_bytes) / kGiB);
  return msg(describe(), " (", figures, fits ? ")" : "; does not fit)");
}

std::string CheckpointingChoice::describe() const {
  const int64_t k = checkpoint_every_blocks;
  if (k == 0) return "none";
  if (k == 1) return "every block";
  const bool teen = k % 100 >= 11 && k % 100 <= 13;
  const char* suffix = teen ? "th" : k % 10 == 1 ? "st" : k % 10 == 2 ? "nd" : k % 10 == 3 ? "rd" : "th";
  return msg("every ", k, suffix, " block");
}

std::string MemoryPrediction::describe() const {
  auto gib = [](int64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
    return std::string(text);
  };
  return msg("weights ", gib(weights_bytes), " + gradients ", gib(gradients_bytes), " + optimizer ",
             gib(optimizer_bytes), " + activations ", gib(activations_bytes), " + workspace ", gib(workspace_bytes),
             " = ", gib(total_bytes()));
}

}  // namespace t5scale
