#include "io/hf_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "core/check.h"
#include "core/file_names.h"
#include "io/safetensors.h"

namespace t5scale {

namespace fs = std::filesystem;
using nlohmann::json;

// ---- names ----

std::string hf_parameter_name(const std::string& name) {
  static const std::vector<std::pair<std::regex, std::string>> rules = {
      {std::regex(R"(^shared\.weight$)"), "shared.weight"},
      {std::regex(R"(^lm_head\.weight$)"), "lm_head.weight"},
      {std::regex(R"(^(encoder|decoder)\.relative_attention_bias\.weight$)"),
       "$1.block.0.layer.0.SelfAttention.relative_attention_bias.weight"},
      {std::regex(R"(^(encoder|decoder)\.final_norm\.weight$)"), "$1.final_layer_norm.weight"},
      {std::regex(R"(^(encoder|decoder)\.blocks\.(\d+)\.self_attn\.(q|k|v|o)\.weight$)"),
       "$1.block.$2.layer.0.SelfAttention.$3.weight"},
      {std::regex(R"(^(encoder|decoder)\.blocks\.(\d+)\.self_attn_norm\.weight$)"), "$1.block.$2.layer.0.layer_norm.weight"},
      {std::regex(R"(^decoder\.blocks\.(\d+)\.cross_attn\.(q|k|v|o)\.weight$)"),
       "decoder.block.$1.layer.1.EncDecAttention.$2.weight"},
      {std::regex(R"(^decoder\.blocks\.(\d+)\.cross_attn_norm\.weight$)"), "decoder.block.$1.layer.1.layer_norm.weight"},
      {std::regex(R"(^encoder\.blocks\.(\d+)\.ff\.(wi|wi_0|wi_1|wo)\.weight$)"),
       "encoder.block.$1.layer.1.DenseReluDense.$2.weight"},
      {std::regex(R"(^encoder\.blocks\.(\d+)\.ff_norm\.weight$)"), "encoder.block.$1.layer.1.layer_norm.weight"},
      {std::regex(R"(^decoder\.blocks\.(\d+)\.ff\.(wi|wi_0|wi_1|wo)\.weight$)"),
       "decoder.block.$1.layer.2.DenseReluDense.$2.weight"},
      {std::regex(R"(^decoder\.blocks\.(\d+)\.ff_norm\.weight$)"), "decoder.block.$1.layer.2.layer_norm.weight"},
  };
  for (const auto& [pattern, replacement] : rules) {
    if (std::regex_match(name, pattern)) return std::regex_replace(name, pattern, replacement);
  }
  throw Error(msg("no Hugging Face name for t5scale parameter '", name, "'"));
}

namespace {

// Names in Hugging Face files that are other names of one tensor: the tied embedding appears under each stack
// (and, in some tied checkpoints, as lm_head); t5scale holds it once as shared.weight.
bool is_alias_of_shared(const std::string& hf_name, const ModelConfig& config) {
  return hf_name == "encoder.embed_tokens.weight" || hf_name == "decoder.embed_tokens.weight" ||
         (config.tie_word_embeddings && hf_name == "lm_head.weight");
}

bool same_shape(const ModelConfig& a, const ModelConfig& b) {
  return a.vocab_size == b.vocab_size && a.d_model == b.d_model && a.d_kv == b.d_kv && a.d_ff == b.d_ff &&
         a.num_layers == b.num_layers && a.num_decoder_layers == b.num_decoder_layers && a.num_heads == b.num_heads &&
         a.relative_attention_num_buckets == b.relative_attention_num_buckets &&
         a.feed_forward == b.feed_forward && a.tie_word_embeddings == b.tie_word_embeddings;
}

// The files of a checkpoint folder, each opened and validated.
std::vector<SafetensorsFile> open_checkpoint_files(const std::string& folder) {
  const fs::path single = fs::path(folder) / "model.safetensors";
  const fs::path index = fs::path(folder) / "model.safetensors.index.json";
  std::vector<SafetensorsFile> files;
  if (fs::exists(index)) {
    std::ifstream in(index);
    json j;
    try {
      j = json::parse(in);
    } catch (const json::exception& e) {
      throw Error(msg(index.string(), ": not valid JSON: ", e.what()));
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object()) {
      throw Error(msg(index.string(), ": no weight_map object"));
    }
    std::set<std::string> shard_names;
    for (const auto& [tensor, file] : j["weight_map"].items()) {
      if (!file.is_string()) throw Error(msg(index.string(), ": weight_map entry '", tensor, "' is not a file name"));
      // A shard is a file beside the index: a path that leaves the folder is refused before anything is opened.
      check_plain_file_name(file.get<std::string>(), index.string(),
                            msg("weight_map entry '", tensor, "' names shard"));
      shard_names.insert(file.get<std::string>());
    }
    for (const auto& shard : shard_names) {
      const fs::path shard_path = fs::path(folder) / shard;
      if (!fs::exists(shard_path)) {
        throw Error(msg(index.string(), ": lists shard '", shard, "', which is not in ", folder));
      }
      files.push_back(SafetensorsFile::open(shard_path.string()));
    }
    // Every tensor the index promises must be in the shard it names.
    for (const auto& [tensor, file] : j["weight_map"].items()) {
      for (const auto& f : files) {
        if (fs::path(f.path()).filename() == file.get<std::string>() && !f.contains(tensor)) {
          throw Error(msg(f.path(), ": has no tensor '", tensor, "', which ", index.string(), " places there"));
        }
      }
    }
  } else if (fs::exists(single)) {
    files.push_back(SafetensorsFile::open(single.string()));
  } else {
    throw Error(msg(folder, ": no model.safetensors or model.safetensors.index.json (pytorch_model.bin is not read; "
                            "convert it with save_pretrained(..., safe_serialization=True))"));
  }
  return files;
}

}  // namespace

void load_hf_checkpoint(T5ModelImpl& model, const std::string& folder) {
  const std::string config_path = (fs::path(folder) / "config.json").string();
  if (fs::exists(config_path)) {
    const ModelConfig file_config = read_hf_config(config_path);
    T5S_CHECK(same_shape(file_config, model.config()), config_path, ": describes a model of another shape than the one "
              "being loaded (", file_config.name, " vs ", model.config().name, ")");
  }
  const std::vector<SafetensorsFile> files = open_checkpoint_files(folder);
  std::map<std::string, const SafetensorsFile*> where;  // HF tensor name -> file
  for (const auto& file : files) {
    for (const auto& name : file.names()) where[name] = &file;
  }

  torch::NoGradGuard no_grad;
  auto params = model.named_parameters();
  const int tp_rank = model.tp().rank(), tp_size = model.tp().size();
  std::set<std::string> used;
  for (const ParameterLayout& layout : model.parameter_layouts()) {
    const std::string hf_name = hf_parameter_name(layout.name);
    auto it = where.find(hf_name);
    const bool tied_alias_available =
        layout.name == "shared.weight" && it == where.end() && where.count("encoder.embed_tokens.weight");
    if (tied_alias_available) it = where.find("encoder.embed_tokens.weight");
    if (it == where.end()) {
      throw Error(msg(folder, ": no tensor '", hf_name, "' in the checkpoint fills parameter '", layout.name, "'"));
    }
    const SafetensorsFile& file = *it->second;
    const SafetensorsEntry& entry = file.entry(it->first);
    if (entry.shape != layout.full_shape) {
      throw Error(msg(file.path(), ": tensor '", entry.name, "' has shape ", c10::IntArrayRef(entry.shape), ", but '",
                      layout.name, "' needs ", c10::IntArrayRef(layout.full_shape)));
    }
    if (!c10::isFloatingType(entry.dtype)) {
      throw Error(msg(file.path(), ": tensor '", entry.name, "' has dtype ", entry.dtype,
                      "; a floating-point dtype is needed"));
    }
    const auto [offset, length] = shard_range(layout, tp_rank, tp_size);
    const torch::Tensor shard = layout.is_split() ? file.read_slice(entry.name, layout.split_dim, offset, length)
                                                  : file.read(entry.name);
    torch::Tensor& param = params[layout.name];
    param.copy_(shard.to(param.scalar_type()));
    used.insert(entry.name);
  }
  for (const auto& [name, file] : where) {
    if (used.count(name) || is_alias_of_shared(name, model.config())) continue;
    throw Error(msg(file->path(), ": tensor '", name, "' maps to no t5scale parameter"));
  }
}

T5Model load_hf_model(const std::string& folder, CommunicatorPtr tp, torch::TensorOptions param_options) {
  const std::string config_path = (fs::path(folder) / "config.json").string();
  if (!fs::exists(config_path)) throw Error(msg(folder, ": no config.json"));
  T5Model model(read_hf_config(config_path), std::move(tp), param_options);
  load_hf_checkpoint(*model, folder);
  return model;
}

void export_hf_checkpoint(T5ModelImpl& model, const std::string& folder) {
  auto params = model.named_parameters();
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  Communicator& tp = model.tp();
  for (const ParameterLayout& layout : model.parameter_layouts()) {
    torch::Tensor local = params[layout.name].detach();
    torch::Tensor full = local;
    if (layout.is_split() && tp.size() > 1) {
      full = torch::cat(tp.all_gather(local.contiguous()).unbind(0), layout.split_dim);
    }
    tensors.emplace_back(hf_parameter_name(layout.name), full);
  }
  if (tp.rank() != 0) return;
  fs::create_directories(folder);
  write_hf_config(model.config(), (fs::path(folder) / "config.json").string());
  // Hugging Face refuses safetensors files whose metadata lacks the framework it was written from.
  write_safetensors((fs::path(folder) / "model.safetensors").string(), tensors, {{"format", "pt"}});
}

}  // namespace t5scale
