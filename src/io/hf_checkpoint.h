// Hugging Face T5 checkpoint folders: config.json plus model.safetensors, or a sharded set of safetensors files
// with model.safetensors.index.json, or torch.save's pytorch_model.bin (sharded: pytorch_model.bin.index.json).
// A folder may be given by model name, found in the local Hugging Face cache (config/hf_model_folder.h).
// Loading maps every tensor name to a t5scale parameter and reads only this TP rank's slice of it (a
// pytorch_model.bin is read whole, one shard at a time); export gathers the shards and writes config.json and
// model.safetensors.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "config/hf_config.h"
#include "config/model_config.h"
#include "model/t5_model.h"

namespace t5scale {

// Hugging Face's name for a t5scale parameter ("encoder.blocks.3.ff.wo.weight" ->
// "encoder.block.3.layer.1.DenseReluDense.wo.weight"). Throws for a name it does not know.
std::string hf_parameter_name(const std::string& t5scale_name);

// Fills every parameter of `model` from the checkpoint folder (or the cached folder of a model name), this rank's
// shard of each. Refuses, naming the file and tensor: a missing, invalid or unreadable file (TensorFlow or Flax
// weights, torch.save's legacy format), a tensor that maps to no parameter, a parameter no tensor fills, a wrong
// shape or a non-floating dtype. The folder's config must describe the model's shape.
void load_hf_checkpoint(T5ModelImpl& model, const std::string& name_or_folder);

// Builds a model from the folder's config.json over the TP group and loads its weights.
T5Model load_hf_model(const std::string& name_or_folder, CommunicatorPtr tp,
                      torch::TensorOptions param_options = torch::kFloat32);

// Gathers every parameter over the TP group; TP rank 0 writes folder/config.json and folder/model.safetensors
// (fp32 parameters are written as they are). Every TP rank must call it.
void export_hf_checkpoint(T5ModelImpl& model, const std::string& folder);

}  // namespace t5scale
