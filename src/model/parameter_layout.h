// How a parameter is laid out across tensor-parallel ranks: its full (unsharded) shape and the dimension it is
// split along. The checkpoint loader, the initialiser and export use it to move between full tensors and shards.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace t5scale {

struct ParameterLayout {
  std::string name;  // local name in its module ("weight"); the model prefixes the module path
  std::vector<int64_t> full_shape;
  int64_t split_dim = -1;  // -1: replicated, every TP rank holds the full tensor
  bool is_split() const { return split_dim >= 0; }
};

// A module whose parameters may be sharded across the TP group reports their layouts.
class ShardedModule {
 public:
  virtual ~ShardedModule() = default;
  virtual std::vector<ParameterLayout> parameter_layouts() const = 0;
};

// This rank's shard of a full tensor (a copy, contiguous).
torch::Tensor shard_of(const torch::Tensor& full, const ParameterLayout& layout, int tp_rank, int tp_size);
// The offset and length of rank `tp_rank`'s shard along the split dimension.
std::pair<int64_t, int64_t> shard_range(const ParameterLayout& layout, int tp_rank, int tp_size);

}  // namespace t5scale
