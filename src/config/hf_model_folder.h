// Where a Hugging Face model is on this machine: a folder as given, or a model name ("google/t5-v1_1-base",
// "t5-small") found in the local Hugging Face cache, without network. Written once for every reader of
// model.init_from: the run config's file check, the study planner and the loaders (io/hf_checkpoint.h).
//
// The cache is the first of $HF_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub and
// ~/.cache/huggingface/hub whose variable is set (huggingface_hub's own order), laid out as huggingface_hub
// downloads:
//   <cache>/models--<org>--<name>/refs/main             the commit that main names
//   <cache>/models--<org>--<name>/snapshots/<commit>/   config.json, model.safetensors, ... (links into blobs/)
// The snapshot is the one refs/main names when that snapshot is there, else the only one, else the newest.
#pragma once

#include <string>
#include <vector>

namespace t5scale {

struct HfModelLookup {
  std::string folder;               // the model's folder; "" when it was not found
  std::vector<std::string> looked;  // every place looked, in order, each with what was (not) there
};

// `name_or_folder` itself when it is a folder; otherwise, when it can be a Hugging Face model name (one or two
// parts of letters, digits, '-', '_' and '.'), that model's snapshot in the cache. Never throws for a missing
// model: `folder` is then "" and `looked` says why.
HfModelLookup find_hf_model_folder(const std::string& name_or_folder);

// "'<name>' is neither a folder nor a model in the Hugging Face cache; looked in: ..." with every place looked,
// and how to get the model there.
std::string hf_model_not_found(const std::string& name_or_folder, const HfModelLookup& lookup);

// The model's folder; throws Error with hf_model_not_found() when there is none.
std::string resolve_hf_model_folder(const std::string& name_or_folder);

}  // namespace t5scale
