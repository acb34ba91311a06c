// The shape and vocabulary of a T5 model, as plain data. Field names follow Hugging Face's T5Config so that a
// user can read one against the other; validation reports every problem with its key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace t5scale {

enum class FeedForwardKind { kRelu, kGatedGelu };  // T5 v1.0 / T5 v1.1

struct ModelConfig {
  std::string name = "custom";
  int64_t vocab_size = 32128;
  int64_t d_model = 512;
  int64_t d_kv = 64;  // per-head dimension; n_heads * d_kv need not equal d_model (t5-3b, t5-11b)
  int64_t d_ff = 2048;
  int64_t num_layers = 6;          // encoder blocks
  int64_t num_decoder_layers = 6;  // decoder blocks
  int64_t num_heads = 8;
  int64_t relative_attention_num_buckets = 32;
  int64_t relative_attention_max_distance = 128;
  double dropout_rate = 0.1;
  double layer_norm_epsilon = 1e-6;
  double initializer_factor = 1.0;
  FeedForwardKind feed_forward = FeedForwardKind::kRelu;
  bool tie_word_embeddings = true;  // v1.0: LM head = shared embedding, logits scaled by d_model^-0.5
  int64_t pad_token_id = 0;
  int64_t eos_token_id = 1;
  int64_t decoder_start_token_id = 0;

  int64_t inner_dim() const { return num_heads * d_kv; }
};

// "relu" / "gated-gelu", as Hugging Face spells them in config.json's feed_forward_proj.
std::string feed_forward_name(FeedForwardKind kind);

// The largest dimension validate() accepts, each far above every published T5 (see validate()).
constexpr int64_t kMaxVocabSize = int64_t{1} << 23;         // 8,388,608 tokens
constexpr int64_t kMaxModelWidth = int64_t{1} << 16;        // d_model 65,536
constexpr int64_t kMaxHeadWidth = int64_t{1} << 13;         // d_kv 8,192
constexpr int64_t kMaxFeedForwardWidth = int64_t{1} << 20;  // d_ff 1,048,576
constexpr int64_t kMaxHeads = int64_t{1} << 12;             // 4,096 heads
constexpr int64_t kMaxLayers = int64_t{1} << 10;            // 1,024 blocks a stack
constexpr int64_t kMaxRelativeBuckets = int64_t{1} << 16;
constexpr int64_t kMaxRelativeDistance = int64_t{1} << 24;

// Every problem with the config, each message naming its key; empty when the config is usable.
std::vector<std::string> validate(const ModelConfig& config);
// Throws t5scale::Error listing all problems, prefixed by `source` (a file name or "--model").
void check_valid(const ModelConfig& config, const std::string& source);

// Named shapes: t5-small/base/large/3b/11b and t5-v1_1-small/base/large/xl/xxl (also google/t5-v1_1-*).
std::vector<std::string> named_model_names();
ModelConfig named_model_config(const std::string& name);  // throws, listing the known names
// A small model for the demo and the tests: trains in seconds on one CPU core.
ModelConfig tiny_model_config(int64_t vocab_size);

// Parameter count of the full (unsharded) model, computed from the shape alone.
int64_t parameter_count(const ModelConfig& config);

// The model's parameters as T5Model names them, in its order, with the elements one TP rank holds: everything
// but the norms is split over tp (q/k/v/o by heads, wi/wo by d_ff, the relative-position bias tables by heads,
// the embedding and the untied LM head by vocabulary). Known without building the model, for the planner.
struct ParameterElements {
  std::string name;  // "encoder.blocks.0.self_attn.q.weight"
  int64_t per_rank = 0;
};
std::vector<ParameterElements> parameter_elements(const ModelConfig& config, int64_t tp);

// Parameters to freeze: they get requires_grad false, stay out of the gradient buckets, the gradient norm and the
// optimizer, and never change.
struct FreezeOptions {
  // The input embedding table, shared.weight (in v1.0 models, whose LM head is tied to it, the LM head too). The
  // untied lm_head.weight of v1.1 models is an output projection and stays trainable; the pattern freezes it.
  bool embeddings = false;
  // Every encoder.* parameter: the encoder blocks, its relative position bias and final norm; not the shared
  // embedding table the encoder reads (that is `embeddings`).
  bool encoder = false;
  // An ECMAScript regular expression searched in each parameter name (std::regex_search: "ff[.]wo" matches
  // "decoder.blocks.0.ff.wo.weight", "^decoder[.]blocks[.]0[.]" the first decoder block); "" freezes nothing by name.
  std::string pattern;
};

// The names among `names` that `freeze` selects, in their order. Throws when the pattern is not a valid regular
// expression, or is set and selects none of the names (a typo would otherwise train everything).
std::vector<std::string> frozen_parameter_names(const std::vector<std::string>& names, const FreezeOptions& freeze);

}  // namespace t5scale
