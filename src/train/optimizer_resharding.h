// Optimizer state across grids: a checkpoint's state read back as whole parameters, and cut again for another grid.
//
// A checkpoint holds each rank's optimizer state as it lives in memory: flat buckets of that TP rank's parameter
// shards (under ZeRO-1 each DP rank its owned range of every bucket; without it DP rank 0 the whole bucket), and
// Adafactor's per-parameter moments. The manifest records the layout that wrote them (optimizer_layout()): the
// optimizer, the grid, ZeRO-1, and where each parameter sits in which bucket. From it, SavedOptimizerState
// assembles the full tensor of any parameter for any state kind, reading only the slices that hold it, and
// load_resharded_state() cuts those into the shards and owned ranges of a live optimizer on another grid. (DeepSpeed's
// "universal checkpoint" makes such per-parameter tensors in an offline pass; here they are made while loading,
// one parameter at a time, so a rank needs one full parameter's state beyond its own.)
#pragma once

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "io/sharded_checkpoint.h"
#include "model/parallel_rng.h"
#include "model/parameter_layout.h"
#include "train/distributed_optimizer.h"

namespace t5scale {

// The layout of `optimizer`'s state() on this rank's grid, as JSON for the checkpoint manifest:
//   {"optimizer": "adamw", "tp": 2, "dp": 2, "zero1": true, "bucket_elements": [padded numel per bucket],
//    "parameters": [{"name", "bucket", "offset", "numel", "full_shape", "split_dim"}, ...]}
// It is the same on every rank: every TP rank's shards have the same sizes, so the buckets fill alike.
nlohmann::json optimizer_layout(DistributedOptimizer& optimizer);

// The optimizer tensors this rank writes into a checkpoint, named "optimizer.<state name>": its own state under
// ZeRO-1; without it the state is the same on every DP rank, so DP rank 0 writes it and the others nothing.
NamedTensors optimizer_checkpoint_tensors(DistributedOptimizer& optimizer);

class SavedOptimizerState {
 public:
  // `folder`: a checkpoint's step folder; `layout`: its manifest's optimizer_layout. Opens shard files on first use.
  SavedOptimizerState(std::string folder, const nlohmann::json& layout);

  const std::string& optimizer_name() const { return optimizer_; }
  int tp() const { return tp_; }
  int dp() const { return dp_; }
  bool zero1() const { return zero1_; }
  // The parameters whose state the checkpoint holds, in bucket order.
  const std::vector<ParameterLayout>& parameters() const { return layouts_; }
  // One of them by name; throws, naming it, when the checkpoint holds no state for it.
  const ParameterLayout& parameter(const std::string& name) const;

  torch::Tensor step() const;  // the step count, 0-d int64
  // The full (unsharded) tensor of bucket-wise state `kind` ("master", "exp_avg", ...) of `parameter`.
  torch::Tensor full_bucket_state(const std::string& kind, const std::string& parameter) const;
  // The full tensor of parameter-wise state `kind` of `parameter`, laid out over the saved TP ranks as `layout`.
  torch::Tensor full_parameter_state(const std::string& parameter, const std::string& kind,
                                     const ParameterLayout& layout) const;

 private:
  struct Placement {
    size_t bucket = 0;
    int64_t offset = 0, numel = 0;
  };
  size_t index_of(const std::string& parameter) const;
  const SafetensorsFile& file(int tp_rank, int dp_rank) const;

  std::string folder_;
  std::string optimizer_;
  int tp_ = 1, dp_ = 1;
  bool zero1_ = false;
  std::vector<int64_t> bucket_elements_;
  std::vector<ParameterLayout> layouts_;
  std::vector<Placement> placements_;
  std::map<std::string, size_t> index_;
  mutable std::map<std::pair<int, int>, std::unique_ptr<SafetensorsFile>> files_;
};

// Fills the state of `live` (any grid whose TP size divides the model; ZeRO-1 on or off) in place from `saved`:
// each parameter's full state cut to live's TP shard and owned range; the parameters then receive the master
// weights. Throws, naming what differs, when the optimizers differ or a trained parameter has no saved state.
void load_resharded_state(const SavedOptimizerState& saved, DistributedOptimizer& live);

// Loads the optimizer state of `loaded` into `live` (the parameters receive the master weights): read as saved
// where the checkpoint's layout is live's own (the same grid, ZeRO-1 and buckets), resharded otherwise. Returns how,
// in a line for the log. Throws when a format 1 checkpoint (without a layout) is resumed on another grid.
std::string load_optimizer_state(const LoadedCheckpoint& loaded, DistributedOptimizer& live);

// The dropout streams for the rank at (tp_rank, dp_rank) of a grid with tp_size, from `loaded`: those of the rank
// at the same place in the writer's grid. A place that grid did not have takes its replicated (default) stream
// from the rank at the same place modulo the writer's grid (that stream is seeded alike on every rank); when the
// TP size changed, the tensor-parallel stream stays `fresh`'s (each TP rank's stream then stays its own). Dropout
// masks of TP-split activations depend on the TP size anyway: only without dropout does a run continue on
// another grid as it would have on its own.
ParallelRng::State resumed_rng_state(const LoadedCheckpoint& loaded, int tp_rank, int tp_size, int dp_rank,
                                     const ParallelRng::State& fresh);

}  // namespace t5scale
