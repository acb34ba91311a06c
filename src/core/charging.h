// What a job is charged for, in one place for the plan's forecast and the run file's /summary: a price per
// node-hour times the share of each node the job holds, or a price per GPU-hour times its GPUs. A job that holds 1 of
// a node's 4 GPUs pays a quarter of the node's price (the node's other GPUs are other jobs'). Without a price the
// cost is unknown, NaN, never 0.
#pragma once

#include <cstdint>
#include <limits>

namespace t5scale {

struct Charging {
  double price_per_node_hour_usd = 0.0;  // 0 = not set
  double price_per_gpu_hour_usd = 0.0;   // 0 = not set (a config sets one of the two)
  int64_t nodes = 1;
  double node_share_fraction = std::numeric_limits<double>::quiet_NaN();  // of each node the job holds
  int64_t allocated_gpus_per_node = 0;  // 0: a CPU job, or unknown
};

// Node-hours charged per hour of wall time: nodes x the node share (NaN when the share is unknown). A price per
// node-hour, dedicated or low-priority, applies to them.
inline double charged_nodes(const Charging& charging) {
  return static_cast<double>(charging.nodes) * charging.node_share_fraction;
}

// USD per hour of wall time; NaN when no price is set, or the share or the GPUs the set price needs are unknown
// (a price per GPU-hour on a CPU job).
inline double charged_usd_per_hour(const Charging& charging) {
  if (charging.price_per_gpu_hour_usd > 0) {
    if (charging.allocated_gpus_per_node <= 0) return std::numeric_limits<double>::quiet_NaN();
    return charging.price_per_gpu_hour_usd * static_cast<double>(charging.allocated_gpus_per_node * charging.nodes);
  }
  if (charging.price_per_node_hour_usd > 0) return charging.price_per_node_hour_usd * charged_nodes(charging);
  return std::numeric_limits<double>::quiet_NaN();
}

// charged_usd_per_hour x wall_time_s / 3600.
inline double cost_usd(const Charging& charging, double wall_time_s) {
  return charged_usd_per_hour(charging) * wall_time_s / 3600.0;
}

}  // namespace t5scale
