// The layout of ranks: world = TP x DP. TP groups are consecutive ranks (one node's NVLink domain), DP groups are
// strided; the formula, written once:  world_rank = tp_rank + dp_rank * tp.
// The grid owns the communicators every layer and the training step receive; there is no global parallel state.
#pragma once

#include <string>
#include <vector>

#include "config/model_config.h"
#include "dist/communicator.h"

namespace t5scale {

enum class CommBackend { kMpi, kNccl };  // MPI carries CPU tensors, NCCL CUDA tensors

struct GridOptions {
  int tp = 1;
  CommBackend backend = CommBackend::kMpi;
  double collective_timeout_s = 600.0;  // a collective pending longer than this aborts the job
  int cuda_device = -1;                 // NCCL: the GPU this rank drives (-1: local rank on the node)
};

class ProcessGrid {
 public:
  // Every reason a grid cannot work for this model, each naming the numbers (empty when it can).
  static std::vector<std::string> validate(int world_size, int tp, const ModelConfig& model);
  // Splits MPI_COMM_WORLD into TP and DP groups. Call validate() first; this throws on the first problem.
  static ProcessGrid create(const GridOptions& options);
  // One process, no MPI: both groups have one rank.
  static ProcessGrid solo();

  int world_size() const { return tp_size * dp_size; }
  int world_rank() const { return tp_rank + dp_rank * tp_size; }

  int tp_size = 1, dp_size = 1;
  int tp_rank = 0, dp_rank = 0;
  CommunicatorPtr tp;     // ranks with the same dp_rank
  CommunicatorPtr dp;     // ranks with the same tp_rank
  CommunicatorPtr world;  // every rank (for agreeing on overflow, timing, ...)
};

}  // namespace t5scale
