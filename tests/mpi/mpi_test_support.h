// Helpers for the multi-rank tests.
#pragma once

#include <mpi.h>

#include <vector>

#include "dist/mpi_runtime.h"
#include "dist/process_grid.h"
#include "model/parameter_layout.h"

namespace t5scale::testing {

inline int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// The TP sizes that divide the world: every grid tp x (world / tp) this run can form.
inline std::vector<int> tp_sizes_for_world() {
  std::vector<int> sizes;
  for (int tp = 1; tp <= world_size(); ++tp) {
    if (world_size() % tp == 0) sizes.push_back(tp);
  }
  return sizes;
}

inline ProcessGrid make_grid(int tp) {
  GridOptions options;
  options.tp = tp;
  options.collective_timeout_s = 300.0;  // a hung test fails with a message instead of burning CI time
  return ProcessGrid::create(options);
}

// A barrier over the world that waits asleep (dist/mpi_runtime.h): the tests run more ranks than cores, and a rank
// left out of a smaller grid would otherwise take a core from the ranks that train it.
inline void sleeping_barrier() { t5scale::sleeping_barrier(MPI_COMM_WORLD); }

// The full tensor from this rank's shard: all-gathered over TP along the split dimension.
inline torch::Tensor gather_shards(const torch::Tensor& shard, const ParameterLayout& layout, Communicator& tp) {
  if (!layout.is_split() || tp.size() == 1) return shard.detach().clone();
  return torch::cat(tp.all_gather(shard.detach().contiguous()).unbind(0), layout.split_dim);
}

}  // namespace t5scale::testing
