// Sharded training checkpoints: one safetensors file per rank plus a manifest, in a folder per step.
//
//   <dir>/step_00000100/manifest.json               rank 0: format, step, grid, model, run state, file checksums
//   <dir>/step_00000100/rank_tp0_dp0.safetensors    each rank: its tensors (model shard, optimizer shard, RNG)
//
// Every rank writes into step_<N>.tmp.<job>/; once all files are written and checksummed, rank 0 writes the
// manifest and renames the folder to step_<N>, then removes all but the newest `keep_last` checkpoints. A job
// killed at any moment leaves either a complete checkpoint or a .tmp folder that is never read. Resuming
// picks the newest complete checkpoint whose files all pass their checksums on every rank, and refuses one
// made for another model or grid, naming what differs (resharding to another TP size is not supported).
#pragma once

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dist/communicator.h"
#include "io/safetensors.h"

namespace t5scale {

// What a checkpoint must match to be resumed: the grid and the model.
struct CheckpointIdentity {
  int tp = 1;
  int dp = 1;
  std::string model_name;
  int64_t parameter_count = 0;
  nlohmann::json model_config;  // ModelConfig as JSON (HF field names)
  // Empty when it matches, otherwise every difference, each naming both values.
  std::vector<std::string> differences_from(const CheckpointIdentity& saved) const;
};
nlohmann::json to_json(const CheckpointIdentity& identity);
CheckpointIdentity checkpoint_identity_from_json(const nlohmann::json& json);

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

struct LoadedCheckpoint {
  int64_t step = 0;
  std::string folder;
  nlohmann::json state;   // what save() was given as run_state (sampler position, loss scale, ...)
  SafetensorsFile shard;  // this rank's tensors
};

class ShardedCheckpointStore {
 public:
  // world: every rank of the job (collectives below run over it, with small tensors on `device`: NCCL carries
  // device tensors only). keep_last >= 1.
  ShardedCheckpointStore(std::string dir, int keep_last, CommunicatorPtr world, int tp_rank, int dp_rank,
                         torch::Device device = torch::kCPU);

  // Collective. Writes this rank's tensors and, on rank 0, the manifest with `identity` and `run_state`.
  // Returns the folder of the new checkpoint.
  std::string save(int64_t step, const NamedTensors& rank_tensors, const CheckpointIdentity& identity,
                   const nlohmann::json& run_state);

  // Collective. The newest complete checkpoint whose files pass their checksums on every rank; std::nullopt
  // when there is none. Skipped (incomplete or corrupt) checkpoints are described in `notes`. Throws when the
  // newest readable checkpoint was made for another model or grid.
  std::optional<LoadedCheckpoint> load_latest(const CheckpointIdentity& expected, std::vector<std::string>* notes);

  // Another rank's file of a loaded checkpoint (load_latest verified every rank's file against the manifest).
  SafetensorsFile open_shard(const LoadedCheckpoint& loaded, int tp_rank, int dp_rank) const;

  // Complete checkpoint folders, newest first (manifest present), as seen by this rank.
  std::vector<std::pair<int64_t, std::string>> complete_checkpoints() const;

  const std::string& dir() const { return dir_; }

 private:
  std::string shard_file_name() const;
  void barrier();

  std::string dir_;
  int keep_last_;
  CommunicatorPtr world_;
  int tp_rank_, dp_rank_;
  torch::Device device_;
};

// A fast 64-bit checksum of a file's bytes (detects truncation and corruption, not tampering), as hex.
std::string file_checksum(const std::string& path);

}  // namespace t5scale
