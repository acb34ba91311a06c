// Sharded training checkpoints: one safetensors file per rank plus a manifest, in a folder per step.
//
//   <dir>/step_00000100/manifest.json               rank 0: format, step, grid, model, run state, optimizer layout,
//                                                   file checksums
//   <dir>/step_00000100/rank_tp0_dp0.safetensors    each rank: its tensors (optimizer shard, RNG)
//
// Every rank writes into step_<N>.tmp/; once all files are written and checksummed, rank 0 writes the manifest and
// renames the folder to step_<N>, then removes all but the newest `keep_last` checkpoints. A job killed at any
// moment leaves either a complete checkpoint or a .tmp folder that is never read. Resuming picks the newest
// complete checkpoint whose files all pass their checksums (each file checked by one rank of the resuming job,
// which may have another grid), and refuses one made for another model, naming what differs. The grid may
// differ: the optimizer layout in the manifest lets the state be cut again (train/optimizer_resharding.h).
#pragma once

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dist/communicator.h"
#include "io/checkpoint_manifest.h"
#include "io/safetensors.h"

namespace t5scale {

// The model a checkpoint holds (which must match to resume it) and the grid that wrote it (which need not).
struct CheckpointIdentity {
  int tp = 1;
  int dp = 1;
  std::string model_name;
  int64_t parameter_count = 0;
  nlohmann::json model_config;  // ModelConfig as JSON (HF field names)
  // Empty when the model matches, otherwise every difference, each naming both values. The grid is not compared.
  std::vector<std::string> differences_from(const CheckpointIdentity& saved) const;
};
nlohmann::json to_json(const CheckpointIdentity& identity);
CheckpointIdentity checkpoint_identity_from_json(const nlohmann::json& json);

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

struct LoadedCheckpoint {
  int64_t step = 0;
  std::string folder;
  CheckpointIdentity saved;         // the model and the grid that wrote it
  nlohmann::json state;             // what save() was given as run_state (sampler position, loss scale, ...)
  nlohmann::json optimizer_layout;  // what save() was given as optimizer_layout (null in format 1 checkpoints)
  std::optional<SafetensorsFile> shard;  // the tensors written by the rank at this rank's grid place, if it existed
};

class ShardedCheckpointStore {
 public:
  // world: every rank of the job (collectives below run over it, with small tensors on `device`: NCCL carries
  // device tensors only). keep_last >= 1.
  ShardedCheckpointStore(std::string dir, int keep_last, CommunicatorPtr world, int tp_rank, int dp_rank,
                         torch::Device device = torch::kCPU);

  // Collective. Writes this rank's tensors and, on rank 0, the manifest with `identity`, `run_state` and
  // `optimizer_layout` (how the optimizer state is spread over the ranks' files). Returns the folder.
  std::string save(int64_t step, const NamedTensors& rank_tensors, const CheckpointIdentity& identity,
                   const nlohmann::json& run_state, const nlohmann::json& optimizer_layout);

  // Collective. The newest complete checkpoint whose files all pass their checksums; std::nullopt when there is
  // none. Every step folder passed over (no manifest, a damaged manifest, a file missing, truncated or corrupt) is
  // described in `notes`, naming the file and what is wrong with it: a caller that gets std::nullopt with notes
  // found checkpoints and could use none. Throws when the newest readable checkpoint was made for another model.
  std::optional<LoadedCheckpoint> load_latest(const CheckpointIdentity& expected, std::vector<std::string>* notes);

  // Another rank's file of a loaded checkpoint (load_latest verified every rank's file against the manifest).
  SafetensorsFile open_shard(const LoadedCheckpoint& loaded, int tp_rank, int dp_rank) const;

  // Complete checkpoint folders, newest first (manifest present), as seen by this rank.
  std::vector<std::pair<int64_t, std::string>> complete_checkpoints() const;
  // Every step_N folder, newest first, with or without a manifest, as seen by this rank.
  std::vector<std::pair<int64_t, std::string>> step_folders() const;

  // Collective, for a run that starts from step 0: when the folder holds checkpoints of an earlier run, rank 0
  // renames it to <dir>.previous.<time> (nothing is overwritten) and returns that name ("" otherwise, and on the
  // other ranks); every rank returns once it is done.
  std::string keep_earlier_checkpoints_aside();

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

// A checkpoint folder written by one process for every rank of a grid (t5scale-ckpt reshard): the same files and
// manifest as ShardedCheckpointStore::save(), made under <dir>/step_N.tmp and renamed when complete.
class CheckpointFolderWriter {
 public:
  // Refuses when <dir>/step_N exists (nothing is overwritten).
  CheckpointFolderWriter(std::string dir, int64_t step);
  void write_shard(int tp_rank, int dp_rank, const NamedTensors& tensors);
  // The manifest, then the rename. Returns the step folder.
  std::string finish(const CheckpointIdentity& identity, const nlohmann::json& run_state,
                     const nlohmann::json& optimizer_layout);

 private:
  std::string temporary_folder() const;
  std::string dir_;
  int64_t step_;
  nlohmann::json files_;
};

// Offline (one process): the checkpoint at `path`, a step folder or a checkpoint folder (its newest complete step),
// with every file checked against the manifest (size and checksum). Throws naming the file and what differs.
struct OpenedCheckpoint {
  LoadedCheckpoint loaded;  // without a shard: no rank is opening it
  nlohmann::json manifest;
};
OpenedCheckpoint open_checkpoint(const std::string& path);

// A fast 64-bit checksum of a file's bytes (detects truncation and corruption, not tampering), as hex.
std::string file_checksum(const std::string& path);

}  // namespace t5scale
