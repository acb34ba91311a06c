#include "config/hf_config.h"

#include <filesystem>
#include <fstream>

#include "core/check.h"

namespace t5scale {

namespace fs = std::filesystem;
using nlohmann::json;

ModelConfig read_hf_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(msg(path, ": cannot open config file"));
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(msg(path, ": not valid JSON: ", e.what()));
  }
  return hf_config_from_json(j, path, hf_model_name_of_folder(fs::path(path).parent_path().string()));
}

std::string hf_model_name_of_folder(const std::string& folder) {
  fs::path snapshot = fs::path(folder).lexically_normal();
  if (snapshot.filename().empty()) snapshot = snapshot.parent_path();  // "folder/"
  const fs::path snapshots = snapshot.parent_path(), repository = snapshots.parent_path();
  const std::string repository_name = repository.filename().string();
  if (snapshots.filename() == "snapshots" && repository_name.rfind("models--", 0) == 0) {
    // The Hugging Face cache's models--<org>--<name>/snapshots/<commit>: the model's own name, not the commit's.
    std::string name = repository_name.substr(8);
    for (size_t at = name.find("--"); at != std::string::npos; at = name.find("--", at + 1)) name.replace(at, 2, "/");
    return name;
  }
  return snapshot.filename().string();
}

ModelConfig hf_config_from_json(const json& j, const std::string& path, const std::string& name) {
  if (!j.is_object()) throw Error(msg(path, ": not a JSON object"));
  std::vector<std::string> errors;
  ModelConfig c;
  c.name = name;

  auto integer = [&](const char* key, int64_t& field, bool required) {
    if (!j.contains(key) || j[key].is_null()) {
      if (required) errors.push_back(msg(key, ": required field is missing"));
      return;
    }
    if (!j[key].is_number_integer()) {
      errors.push_back(msg(key, ": must be an integer, got ", j[key].dump()));
      return;
    }
    field = j[key].get<int64_t>();
  };
  auto number = [&](const char* key, double& field) {
    if (!j.contains(key) || j[key].is_null()) return;
    if (!j[key].is_number()) {
      errors.push_back(msg(key, ": must be a number, got ", j[key].dump()));
      return;
    }
    field = j[key].get<double>();
  };
  if (j.contains("model_type") && j["model_type"] != "t5" && j["model_type"] != "mt5") {
    errors.push_back(msg("model_type: ", j["model_type"].dump(), " is not a T5 model (t5 or mt5)"));
  }
  integer("vocab_size", c.vocab_size, true);
  integer("d_model", c.d_model, true);
  integer("d_kv", c.d_kv, true);
  integer("d_ff", c.d_ff, true);
  integer("num_layers", c.num_layers, true);
  integer("num_heads", c.num_heads, true);
  c.num_decoder_layers = c.num_layers;
  integer("num_decoder_layers", c.num_decoder_layers, false);
  integer("relative_attention_num_buckets", c.relative_attention_num_buckets, false);
  integer("relative_attention_max_distance", c.relative_attention_max_distance, false);
  number("dropout_rate", c.dropout_rate);
  number("layer_norm_epsilon", c.layer_norm_epsilon);
  number("initializer_factor", c.initializer_factor);
  integer("pad_token_id", c.pad_token_id, false);
  integer("eos_token_id", c.eos_token_id, false);
  c.decoder_start_token_id = c.pad_token_id;  // T5 starts decoding from pad
  integer("decoder_start_token_id", c.decoder_start_token_id, false);
  if (j.contains("feed_forward_proj")) {
    const auto& v = j["feed_forward_proj"];
    if (v == "relu") {
      c.feed_forward = FeedForwardKind::kRelu;
    } else if (v == "gated-gelu") {
      c.feed_forward = FeedForwardKind::kGatedGelu;
    } else {
      errors.push_back(msg("feed_forward_proj: ", v.dump(), " is not supported (relu or gated-gelu)"));
    }
  }
  if (j.contains("tie_word_embeddings")) {
    if (!j["tie_word_embeddings"].is_boolean()) {
      errors.push_back(msg("tie_word_embeddings: must be true or false, got ", j["tie_word_embeddings"].dump()));
    } else {
      c.tie_word_embeddings = j["tie_word_embeddings"].get<bool>();
    }
  }
  for (const auto& e : validate(c)) errors.push_back(e);
  if (!errors.empty()) {
    std::string message = path + ": invalid T5 config:";
    for (const auto& e : errors) message += "\n  " + e;
    throw Error(message);
  }
  return c;
}

json hf_config_json(const ModelConfig& c) {
  const bool gated = c.feed_forward == FeedForwardKind::kGatedGelu;
  return {
      {"architectures", {"T5ForConditionalGeneration"}},
      {"model_type", "t5"},
      {"is_encoder_decoder", true},
      {"vocab_size", c.vocab_size},
      {"d_model", c.d_model},
      {"d_kv", c.d_kv},
      {"d_ff", c.d_ff},
      {"num_layers", c.num_layers},
      {"num_decoder_layers", c.num_decoder_layers},
      {"num_heads", c.num_heads},
      {"relative_attention_num_buckets", c.relative_attention_num_buckets},
      {"relative_attention_max_distance", c.relative_attention_max_distance},
      {"dropout_rate", c.dropout_rate},
      {"layer_norm_epsilon", c.layer_norm_epsilon},
      {"initializer_factor", c.initializer_factor},
      {"feed_forward_proj", feed_forward_name(c.feed_forward)},
      {"dense_act_fn", gated ? "gelu_new" : "relu"},
      {"is_gated_act", gated},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"pad_token_id", c.pad_token_id},
      {"eos_token_id", c.eos_token_id},
      {"decoder_start_token_id", c.decoder_start_token_id},
      {"use_cache", true},
  };
}

void write_hf_config(const ModelConfig& c, const std::string& path) {
  const json j = hf_config_json(c);
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary);
    T5S_CHECK(out.good(), temporary, ": cannot open for writing");
    out << j.dump(2) << "\n";
    T5S_CHECK(out.good(), temporary, ": write failed");
  }
  fs::rename(temporary, path);
}

}  // namespace t5scale
