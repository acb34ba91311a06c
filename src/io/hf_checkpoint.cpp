#include "io/hf_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>

#include "config/hf_model_folder.h"
#include "core/check.h"
#include "core/file_names.h"
#include "io/safetensors.h"
#include "io/torch_state_dict.h"

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

// A checkpoint folder's weight files in loading order, and the index that lists them (if sharded).
struct CheckpointFiles {
  std::vector<std::string> paths;
  std::string index;                              // "" for a single file
  std::map<std::string, std::string> weight_map;  // the index's tensor -> shard file name
};

// Weight files t5scale does not read, with what to do about each.
const std::vector<std::pair<std::string, std::string>>& unread_weight_files() {
  static const std::vector<std::pair<std::string, std::string>> files = {
      {"tf_model.h5", "TensorFlow weights"},
      {"flax_model.msgpack", "Flax weights"},
      {"model.ckpt.index", "a TensorFlow checkpoint"},
  };
  return files;
}

// The shards an index lists, each checked to be a plain file beside it and to exist.
CheckpointFiles read_index(const std::string& folder, const fs::path& index) {
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
  CheckpointFiles files;
  files.index = index.string();
  std::set<std::string> shard_names;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string()) throw Error(msg(index.string(), ": weight_map entry '", tensor, "' is not a file name"));
    // A shard is a file beside the index: a path that leaves the folder is refused before anything is opened.
    check_plain_file_name(file.get<std::string>(), index.string(), msg("weight_map entry '", tensor, "' names shard"));
    shard_names.insert(file.get<std::string>());
    files.weight_map[tensor] = file.get<std::string>();
  }
  for (const auto& shard : shard_names) {
    const fs::path shard_path = fs::path(folder) / shard;
    if (!fs::exists(shard_path)) {
      throw Error(msg(index.string(), ": lists shard '", shard, "', which is not in ", folder));
    }
    files.paths.push_back(shard_path.string());
  }
  return files;
}

// Which files hold the weights: safetensors before torch.save's pytorch_model.bin, as transformers prefers them;
// of each, the index of a sharded set before a single file.
CheckpointFiles checkpoint_files(const std::string& folder) {
  const fs::path dir(folder);
  for (const char* index : {"model.safetensors.index.json", "pytorch_model.bin.index.json"}) {
    if (fs::exists(dir / index)) return read_index(folder, dir / index);
  }
  for (const char* single : {"model.safetensors", "pytorch_model.bin"}) {
    if (fs::exists(dir / single)) return CheckpointFiles{{(dir / single).string()}, "", {}};
  }
  std::string message = msg(folder, ": no model.safetensors, model.safetensors.index.json, pytorch_model.bin or "
                                    "pytorch_model.bin.index.json");
  for (const auto& [name, what] : unread_weight_files()) {
    if (fs::exists(dir / name)) {
      message += msg("; it holds ", name, " (", what, "), which t5scale does not read: convert it with transformers "
                     "(from_pretrained(folder, from_tf=True or from_flax=True), then save_pretrained)");
    }
  }
  throw Error(message);
}

// One weight file, opened: safetensors are mapped and read a slice at a time; a torch.save state dict is read
// whole when opened.
class WeightFile {
 public:
  explicit WeightFile(const std::string& path) : path_(path) {
    if (fs::path(path).extension() == ".safetensors") {
      safetensors_.emplace(SafetensorsFile::open(path));
      for (const auto& name : safetensors_->names()) names_.push_back(name);
    } else {
      for (auto& [name, tensor] : read_torch_state_dict(path)) {
        names_.push_back(name);
        tensors_.emplace(name, std::move(tensor));
      }
    }
  }
  const std::string& path() const { return path_; }
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const {
    return safetensors_ ? safetensors_->contains(name) : tensors_.count(name) > 0;
  }
  std::vector<int64_t> shape(const std::string& name) const {
    return safetensors_ ? safetensors_->entry(name).shape : tensors_.at(name).sizes().vec();
  }
  torch::ScalarType dtype(const std::string& name) const {
    return safetensors_ ? safetensors_->entry(name).dtype : tensors_.at(name).scalar_type();
  }
  // Elements [offset, offset + length) along `dim`.
  torch::Tensor read_slice(const std::string& name, int64_t dim, int64_t offset, int64_t length) const {
    if (safetensors_) return safetensors_->read_slice(name, dim, offset, length);
    return tensors_.at(name).narrow(dim, offset, length);
  }
  torch::Tensor read(const std::string& name) const {
    return safetensors_ ? safetensors_->read(name) : tensors_.at(name);
  }

 private:
  std::string path_;
  std::optional<SafetensorsFile> safetensors_;
  std::vector<std::string> names_;
  std::map<std::string, torch::Tensor> tensors_;
};

// Copies this TP rank's slice of tensor `name` of `file` into `param` after checking its shape and dtype.
void fill_parameter(torch::Tensor& param, const ParameterLayout& layout, const WeightFile& file,
                    const std::string& name, int tp_rank, int tp_size) {
  const std::vector<int64_t> shape = file.shape(name);
  if (shape != layout.full_shape) {
    throw Error(msg(file.path(), ": tensor '", name, "' has shape ", c10::IntArrayRef(shape), ", but '", layout.name,
                    "' needs ", c10::IntArrayRef(layout.full_shape)));
  }
  if (!c10::isFloatingType(file.dtype(name))) {
    throw Error(msg(file.path(), ": tensor '", name, "' has dtype ", file.dtype(name),
                    "; a floating-point dtype is needed"));
  }
  const auto [offset, length] = shard_range(layout, tp_rank, tp_size);
  const torch::Tensor shard =
      layout.is_split() ? file.read_slice(name, layout.split_dim, offset, length) : file.read(name);
  param.copy_(shard.to(param.scalar_type()));
}

}  // namespace

void load_hf_checkpoint(T5ModelImpl& model, const std::string& name_or_folder) {
  const std::string folder = resolve_hf_model_folder(name_or_folder);
  const std::string config_path = (fs::path(folder) / "config.json").string();
  if (fs::exists(config_path)) {
    const ModelConfig file_config = read_hf_config(config_path);
    T5S_CHECK(same_shape(file_config, model.config()), config_path, ": describes a model of another shape than the one "
              "being loaded (", file_config.name, " vs ", model.config().name, ")");
  }
  const CheckpointFiles files = checkpoint_files(folder);
  const std::vector<ParameterLayout> layouts = model.parameter_layouts();
  std::map<std::string, const ParameterLayout*> by_hf_name;
  const ParameterLayout* shared = nullptr;
  for (const ParameterLayout& layout : layouts) {
    by_hf_name[hf_parameter_name(layout.name)] = &layout;
    if (layout.name == "shared.weight") shared = &layout;
  }

  torch::NoGradGuard no_grad;
  auto params = model.named_parameters();
  const int tp_rank = model.tp().rank(), tp_size = model.tp().size();
  std::map<std::string, std::string> filled_from;  // parameter -> the tensor that filled it
  std::string unmapped, unmapped_file;             // the first tensor that maps to no parameter
  // File by file, so that at most one torch.save shard is in memory at a time.
  for (const std::string& path : files.paths) {
    const WeightFile file(path);
    // Every tensor the index promises must be in the shard it names.
    for (const auto& [tensor, shard] : files.weight_map) {
      if (fs::path(path).filename() == shard && !file.contains(tensor)) {
        throw Error(msg(path, ": has no tensor '", tensor, "', which ", files.index, " places there"));
      }
    }
    for (const std::string& name : file.names()) {
      const ParameterLayout* layout = nullptr;
      if (auto it = by_hf_name.find(name); it != by_hf_name.end()) {
        layout = it->second;
      } else if (name == "encoder.embed_tokens.weight" && shared != nullptr && !filled_from.count(shared->name)) {
        layout = shared;  // the tied embedding under its encoder name; shared.weight, if it follows, replaces it
      } else if (!is_alias_of_shared(name, model.config()) && unmapped.empty()) {
        unmapped = name;
        unmapped_file = path;
      }
      if (layout == nullptr) continue;
      fill_parameter(params[layout->name], *layout, file, name, tp_rank, tp_size);
      filled_from[layout->name] = name;
    }
  }
  for (const ParameterLayout& layout : layouts) {
    if (!filled_from.count(layout.name)) {
      throw Error(msg(folder, ": no tensor '", hf_parameter_name(layout.name), "' in the checkpoint fills parameter '",
                      layout.name, "'"));
    }
  }
  if (!unmapped.empty()) throw Error(msg(unmapped_file, ": tensor '", unmapped, "' maps to no t5scale parameter"));
}

T5Model load_hf_model(const std::string& name_or_folder, CommunicatorPtr tp, torch::TensorOptions param_options) {
  const std::string folder = resolve_hf_model_folder(name_or_folder);
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
