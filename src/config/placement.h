// Where ranks may sit: a tensor-parallel group never spans nodes. Its all-reduces run twice in every sub-layer and
// need the node's NVLink; across a network they would make every step wait on it. The planner applies the rule to
// the hosts a launch will give (ranks filled node by node), the trainer to the hostnames its ranks see.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace t5scale {

// The first TP group (tp consecutive ranks) whose ranks are not all on one host, described with its ranks and
// hosts: "TP group 1 (ranks 2-3) spans hosts t5n1, t5n2"; nullopt when every group stays on its host.
std::optional<std::string> tp_group_spanning_hosts(const std::vector<std::string>& host_of_rank, int64_t tp);

// The hosts of a launch of `nodes` x `ranks_per_node` ranks, filled node by node as srun and mpirun place them
// by default: "node 0", "node 1", ...
std::vector<std::string> hosts_filled_node_by_node(int64_t nodes, int64_t ranks_per_node);

}  // namespace t5scale
