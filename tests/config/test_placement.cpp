#include <gtest/gtest.h>

#include "config/placement.h"
#include "support/base_test_support.h"

namespace t5scale {
namespace {

TEST(Placement, TpGroupsInsideTheirHostsPass) {
  const std::vector<std::string> two_nodes_of_four = hosts_filled_node_by_node(2, 4);
  ASSERT_EQ(two_nodes_of_four.size(), 8u);
  EXPECT_EQ(two_nodes_of_four[3], "node 0");
  EXPECT_EQ(two_nodes_of_four[4], "node 1");
  for (int64_t tp : {1, 2, 4}) EXPECT_FALSE(tp_group_spanning_hosts(two_nodes_of_four, tp).has_value()) << tp;
  EXPECT_FALSE(tp_group_spanning_hosts({"a", "a", "a"}, 3).has_value());
}

TEST(Placement, TheFirstGroupOnTwoHostsIsNamedWithItsRanksAndHosts) {
  // tp larger than a node: group 0 already spans.
  EXPECT_EQ(tp_group_spanning_hosts(hosts_filled_node_by_node(2, 4), 8).value_or(""),
            "TP group 0 (ranks 0-7) spans hosts node 0, node 1");
  // tp not dividing the ranks per node: 3 ranks per node, tp 2: group 1 holds ranks 2 and 3.
  EXPECT_EQ(tp_group_spanning_hosts(hosts_filled_node_by_node(2, 3), 2).value_or(""),
            "TP group 1 (ranks 2-3) spans hosts node 0, node 1");
  // Hosts as a launch reports them, placed round robin (srun --distribution=cyclic): every group spans.
  EXPECT_EQ(tp_group_spanning_hosts({"t5n1", "t5n2", "t5n1", "t5n2"}, 2).value_or(""),
            "TP group 0 (ranks 0-1) spans hosts t5n1, t5n2");
  EXPECT_THROW(tp_group_spanning_hosts({"a"}, 0), std::exception);
}

}  // namespace
}  // namespace t5scale
