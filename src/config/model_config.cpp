#include "config/model_config.h"

#include <map>
#include <regex>

#include "core/check.h"

namespace t5scale {

std::string feed_forward_name(FeedForwardKind kind) {
  return kind == FeedForwardKind::kRelu ? "relu" : "gated-gelu";
}

std::vector<std::string> validate(const ModelConfig& c) {
  std::vector<std::string> errors;
  // Each dimension between 1 and a bound far above every published T5 (the largest: mT5/umT5's 256,384-token
  // vocabulary, T5-XXL's d_ff 65,536, d_kv 128 and 128 heads, 24 blocks a stack; UL2's 32): a config.json with a
  // vocabulary of 10^12 is a damaged or hostile file, and refusing it here keeps every product of two dimensions
  // (the parameter and byte counts of the memory model) far inside int64.
  auto require_in_range = [&](const char* key, int64_t value, int64_t least, int64_t most) {
    if (value < least || value > most) {
      errors.push_back(value < least ? msg(key, ": must be at least ", least, ", got ", value)
                                     : msg(key, ": ", value, " is beyond any T5 (at most ", most, ")"));
    }
  };
  require_in_range("vocab_size", c.vocab_size, 1, kMaxVocabSize);
  require_in_range("d_model", c.d_model, 1, kMaxModelWidth);
  require_in_range("d_kv", c.d_kv, 1, kMaxHeadWidth);
  require_in_range("d_ff", c.d_ff, 1, kMaxFeedForwardWidth);
  require_in_range("num_layers", c.num_layers, 1, kMaxLayers);
  require_in_range("num_decoder_layers", c.num_decoder_layers, 1, kMaxLayers);
  require_in_range("num_heads", c.num_heads, 1, kMaxHeads);
  require_in_range("relative_attention_max_distance", c.relative_attention_max_distance, 1, kMaxRelativeDistance);
  // Bidirectional buckets split the range in two halves, each with an exact and a logarithmic part.
  require_in_range("relative_attention_num_buckets", c.relative_attention_num_buckets, 4, kMaxRelativeBuckets);
  if (!(c.dropout_rate >= 0.0 && c.dropout_rate < 1.0)) {
    errors.push_back(msg("dropout_rate: must be in [0, 1), got ", c.dropout_rate));
  }
  if (!(c.layer_norm_epsilon > 0.0)) {
    errors.push_back(msg("layer_norm_epsilon: must be positive, got ", c.layer_norm_epsilon));
  }
  if (!(c.initializer_factor > 0.0)) {
    errors.push_back(msg("initializer_factor: must be positive, got ", c.initializer_factor));
  }
  auto require_token = [&](const char* key, int64_t id) {
    if (id < 0 || (c.vocab_size > 0 && id >= c.vocab_size)) {
      errors.push_back(msg(key, ": ", id, " is not a token id of a vocabulary of ", c.vocab_size));
    }
  };
  require_token("pad_token_id", c.pad_token_id);
  require_token("eos_token_id", c.eos_token_id);
  require_token("decoder_start_token_id", c.decoder_start_token_id);
  return errors;
}

void check_valid(const ModelConfig& config, const std::string& source) {
  const auto errors = validate(config);
  if (errors.empty()) return;
  std::string message = source + ": invalid model config:";
  for (const auto& e : errors) message += "\n  " + e;
  throw Error(message);
}

namespace {

ModelConfig v1_0(const std::string& name, int64_t d_model, int64_t d_ff, int64_t d_kv, int64_t heads, int64_t layers) {
  ModelConfig c;
  c.name = name;
  c.d_model = d_model;
  c.d_ff = d_ff;
  c.d_kv = d_kv;
  c.num_heads = heads;
  c.num_layers = c.num_decoder_layers = layers;
  c.feed_forward = FeedForwardKind::kRelu;
  c.tie_word_embeddings = true;
  return c;
}

ModelConfig v1_1(const std::string& name, int64_t d_model, int64_t d_ff, int64_t d_kv, int64_t heads, int64_t layers) {
  ModelConfig c = v1_0(name, d_model, d_ff, d_kv, heads, layers);
  c.feed_forward = FeedForwardKind::kGatedGelu;
  c.tie_word_embeddings = false;
  c.dropout_rate = 0.1;  // v1.1 was pre-trained without dropout; its published configs set 0.1 for fine-tuning
  return c;
}

// The shapes of the published checkpoints (their config.json files); all use a 32128-token vocabulary.
const std::map<std::string, ModelConfig>& named_models() {
  static const std::map<std::string, ModelConfig> models = {
      {"t5-small", v1_0("t5-small", 512, 2048, 64, 8, 6)},
      {"t5-base", v1_0("t5-base", 768, 3072, 64, 12, 12)},
      {"t5-large", v1_0("t5-large", 1024, 4096, 64, 16, 24)},
      {"t5-3b", v1_0("t5-3b", 1024, 16384, 128, 32, 24)},
      {"t5-11b", v1_0("t5-11b", 1024, 65536, 128, 128, 24)},
      {"t5-v1_1-small", v1_1("t5-v1_1-small", 512, 1024, 64, 6, 8)},
      {"t5-v1_1-base", v1_1("t5-v1_1-base", 768, 2048, 64, 12, 12)},
      {"t5-v1_1-large", v1_1("t5-v1_1-large", 1024, 2816, 64, 16, 24)},
      {"t5-v1_1-xl", v1_1("t5-v1_1-xl", 2048, 5120, 64, 32, 24)},
      {"t5-v1_1-xxl", v1_1("t5-v1_1-xxl", 4096, 10240, 64, 64, 24)},
  };
  return models;
}

}  // namespace

std::vector<std::string> named_model_names() {
  std::vector<std::string> names;
  for (const auto& [name, config] : named_models()) names.push_back(name);
  return names;
}

ModelConfig named_model_config(const std::string& name) {
  std::string key = name;
  for (const char* prefix : {"google/", "google-t5/"}) {
    if (key.rfind(prefix, 0) == 0) key = key.substr(std::string(prefix).size());
  }
  const auto& models = named_models();
  auto it = models.find(key);
  if (it == models.end()) {
    std::vector<std::string> known;
    for (const auto& [n, c] : models) known.push_back(n);
    throw Error(msg("unknown model name '", name, "'; known names: ", join(known, ", ")));
  }
  return it->second;
}

ModelConfig tiny_model_config(int64_t vocab_size) {
  ModelConfig c;
  c.name = "tiny";
  c.vocab_size = vocab_size;
  c.d_model = 64;
  c.d_kv = 16;
  c.d_ff = 128;
  c.num_heads = 4;
  c.num_layers = 2;
  c.num_decoder_layers = 2;
  c.relative_attention_num_buckets = 16;
  c.relative_attention_max_distance = 32;
  c.dropout_rate = 0.0;
  c.feed_forward = FeedForwardKind::kGatedGelu;
  c.tie_word_embeddings = false;
  return c;
}

int64_t parameter_count(const ModelConfig& c) {
  const int64_t attention = 4 * c.d_model * c.inner_dim();  // q, k, v: (inner, d_model); o: (d_model, inner)
  const int64_t ff_inputs = c.feed_forward == FeedForwardKind::kGatedGelu ? 2 : 1;
  const int64_t feed_forward = (ff_inputs + 1) * c.d_model * c.d_ff;
  const int64_t norm = c.d_model;
  const int64_t bias_table = c.relative_attention_num_buckets * c.num_heads;  // first block of each stack
  const int64_t encoder = c.num_layers * (attention + feed_forward + 2 * norm) + bias_table + norm;
  const int64_t decoder = c.num_decoder_layers * (2 * attention + feed_forward + 3 * norm) + bias_table + norm;
  const int64_t embeddings = c.vocab_size * c.d_model * (c.tie_word_embeddings ? 1 : 2);
  return encoder + decoder + embeddings;
}

std::vector<ParameterElements> parameter_elements(const ModelConfig& c, int64_t tp) {
  T5S_CHECK(tp >= 1, "tp must be at least 1, got ", tp);
  std::vector<ParameterElements> out;
  auto add = [&](const std::string& name, int64_t full, bool split) { out.push_back({name, split ? full / tp : full}); };
  const int64_t projection = c.d_model * c.inner_dim();
  const int64_t ff_weight = c.d_model * c.d_ff;
  auto attention = [&](const std::string& prefix) {
    for (const char* p : {"q", "k", "v", "o"}) add(prefix + "." + p + ".weight", projection, true);
  };
  auto stack = [&](const std::string& stack_name, int64_t blocks, bool is_decoder) {
    add(stack_name + ".relative_attention_bias.weight", c.relative_attention_num_buckets * c.num_heads, true);
    for (int64_t i = 0; i < blocks; ++i) {
      const std::string block = stack_name + ".blocks." + std::to_string(i);
      add(block + ".self_attn_norm.weight", c.d_model, false);
      attention(block + ".self_attn");
      if (is_decoder) {
        add(block + ".cross_attn_norm.weight", c.d_model, false);
        attention(block + ".cross_attn");
      }
      add(block + ".ff_norm.weight", c.d_model, false);
      if (c.feed_forward == FeedForwardKind::kGatedGelu) {
        add(block + ".ff.wi_0.weight", ff_weight, true);
        add(block + ".ff.wi_1.weight", ff_weight, true);
      } else {
        add(block + ".ff.wi.weight", ff_weight, true);
      }
      add(block + ".ff.wo.weight", ff_weight, true);
    }
    add(stack_name + ".final_norm.weight", c.d_model, false);
  };
  add("shared.weight", c.vocab_size * c.d_model, true);
  stack("encoder", c.num_layers, false);
  stack("decoder", c.num_decoder_layers, true);
  if (!c.tie_word_embeddings) add("lm_head.weight", c.vocab_size * c.d_model, true);
  return out;
}

std::vector<std::string> frozen_parameter_names(const std::vector<std::string>& names, const FreezeOptions& freeze) {
  std::regex pattern;
  if (!freeze.pattern.empty()) {
    try {
      pattern = std::regex(freeze.pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw Error(msg("train.freeze_pattern '", freeze.pattern, "' is not a valid regular expression: ", e.what()));
    }
  }
  std::vector<std::string> frozen;
  bool pattern_matched = false;
  for (const std::string& name : names) {
    const bool by_pattern = !freeze.pattern.empty() && std::regex_search(name, pattern);
    pattern_matched = pattern_matched || by_pattern;
    if (by_pattern || (freeze.embeddings && name == "shared.weight") ||
        (freeze.encoder && name.rfind("encoder.", 0) == 0)) {
      frozen.push_back(name);
    }
  }
  T5S_CHECK(freeze.pattern.empty() || pattern_matched, "train.freeze_pattern '", freeze.pattern,
            "' matches no parameter name (names look like 'encoder.blocks.0.self_attn.q.weight')");
  return frozen;
}

}  // namespace t5scale
