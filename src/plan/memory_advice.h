// What would make a run's predicted memory per device smaller, with the prediction each change gives: the advice
// t5scale-train prints when it refuses a run that does not fit, and t5scale-study plan beside each run that does
// not. Only changes that lower the prediction are offered, each as the setting to write.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "plan/cost_model.h"

namespace t5scale {

struct MemoryRemedy {
  std::string setting;      // "parallel.zero2=true", "train.grad_accumulation x2 (micro-batch 4 -> 2)"
  MemoryPrediction memory;  // predicted per device with it
  bool fits = false;        // with 5% to spare, against device_memory_bytes (false where that is unknown)
  std::string describe() const;  // "parallel.zero2=true: 14.20 GiB, fits"
};

// What a run may change without changing its result: its world (for a larger TP inside a node) and the largest TP
// group a node holds.
struct RemedyLimits {
  int64_t world_size = 1;
  int64_t ranks_per_node = 1;
  int64_t device_memory_bytes = 0;  // 0: unknown
};

// In the order to try: activation checkpointing (the least that fits, else every block), ZeRO-1 then ZeRO-2 (with
// DP > 1; ZeRO-1 not with Adafactor), twice the TP inside a node (the same world: DP halves, so with a fixed global
// batch each replica's micro-batch grows), and a smaller micro-batch with more accumulation (the same global
// batch); where none of them fits alone, all of them together ("all together: ..."); and on a GPU where nothing
// fits even so, the optimizer's state in host memory (parallel.offload_optimizer, with every block recomputed where
// it needs it; its host memory in the prediction's host_bytes). `now`: the run's memory
// inputs as resolved (checkpointing included).
std::vector<MemoryRemedy> memory_remedies(const ModelConfig& model, const MemoryInputs& now, const RemedyLimits& limits);

// Why a GPU run with its optimizer's state in host memory (parallel.offload_optimizer) cannot start on this node:
// the predicted host memory per rank (MemoryPrediction::host_bytes) times the node's ranks against the node's
// available memory (MemAvailable; its total beside it), with 5% to spare as for the device. "" when it fits or there
// is nothing on the host (host_bytes 0).
std::string host_memory_refusal(int64_t host_bytes_per_rank, int64_t ranks_per_node, int64_t node_total_bytes,
                                int64_t node_available_bytes);

}  // namespace t5scale
