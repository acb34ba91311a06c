#include "config/placement.h"

#include <algorithm>

#include "core/check.h"

namespace t5scale {

std::optional<std::string> tp_group_spanning_hosts(const std::vector<std::string>& host_of_rank, int64_t tp) {
  T5S_CHECK(tp >= 1, "tp must be at least 1, got ", tp);
  const auto world = static_cast<int64_t>(host_of_rank.size());
  for (int64_t first = 0; first < world; first += tp) {
    const int64_t last = std::min(first + tp, world) - 1;
    std::string hosts = host_of_rank[static_cast<size_t>(first)];
    bool spans = false;
    for (int64_t rank = first + 1; rank <= last; ++rank) {
      const std::string& host = host_of_rank[static_cast<size_t>(rank)];
      if (host != host_of_rank[static_cast<size_t>(rank - 1)]) {
        hosts += ", " + host;
        spans = true;
      }
    }
    if (spans) return msg("TP group ", first / tp, " (ranks ", first, "-", last, ") spans hosts ", hosts);
  }
  return std::nullopt;
}

std::vector<std::string> hosts_filled_node_by_node(int64_t nodes, int64_t ranks_per_node) {
  std::vector<std::string> hosts;
  for (int64_t node = 0; node < nodes; ++node) {
    for (int64_t r = 0; r < ranks_per_node; ++r) hosts.push_back(msg("node ", node));
  }
  return hosts;
}

}  // namespace t5scale
