// The manifest of a sharded checkpoint (io/sharded_checkpoint.h): its format and the structure every loader relies
// on, checked as text so that a manifest copied from elsewhere is read only when it is whole, names nothing outside
// its own step folder, and lists the shards of its own grid. No LibTorch here: the fuzzing harness reads it alone.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace t5scale {

inline constexpr const char* kCheckpointFormat = "t5scale-checkpoint";
// 2: the manifest has the optimizer layout, so a checkpoint resumes on any grid. 1 resumes on its own grid only.
inline constexpr int kCheckpointFormatVersion = 2;
inline constexpr int kOldestReadableCheckpointFormatVersion = 1;

// The file name of rank (tp_rank, dp_rank)'s tensors in a checkpoint folder: rank_tp<t>_dp<d>.safetensors.
std::string checkpoint_shard_name(int tp_rank, int dp_rank);

// Every way `manifest` differs from what a save writes, each naming the field; empty when it is whole.
std::vector<std::string> manifest_problems(const nlohmann::json& manifest);

// The manifest in `text` (read from `path`, named in every error), checked: JSON, the format and a readable
// version, manifest_problems() empty, and its step equal to `folder_step` (the step_N folder it lies in; -1 when
// it lies elsewhere). Throws t5scale::Error naming the path and every problem.
nlohmann::json parse_checkpoint_manifest(const std::string& text, const std::string& path, int64_t folder_step);

}  // namespace t5scale
