// Hugging Face's T5 config.json, read into a ModelConfig and written from one. Plain JSON, no LibTorch: the
// trainer (through io/hf_checkpoint.h) and the study planner read checkpoints' shapes with the same code.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "config/model_config.h"

namespace t5scale {

// Reads a T5 config.json. The shape fields (vocab_size, d_model, d_kv, d_ff, num_layers, num_heads) are
// required; the others default as in Hugging Face's T5Config; keys t5scale does not use are ignored.
// The model is named by its folder (hf_model_name_of_folder).
ModelConfig read_hf_config(const std::string& config_json_path);

// A model folder's name: "org/name" for a snapshot of the Hugging Face cache (models--org--name/snapshots/<commit>),
// else the folder's own name.
std::string hf_model_name_of_folder(const std::string& folder);
// The same from parsed JSON; `source` names it in messages, `name` becomes the model's name.
ModelConfig hf_config_from_json(const nlohmann::json& json, const std::string& source, const std::string& name);
void write_hf_config(const ModelConfig& config, const std::string& config_json_path);
// The config.json contents (Hugging Face's T5Config fields) as JSON.
nlohmann::json hf_config_json(const ModelConfig& config);

}  // namespace t5scale
