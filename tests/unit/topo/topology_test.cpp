// Topology facts that hold on any machine, and NUMA node selection against synthetic
// multi-node topologies (this machine has one node).
#include <sched.h>

#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "topo/topology.h"

namespace sluice::detail {
namespace {

TEST(Topology, NodeOfCpuZeroExists) {
  auto topo = Topology::load();
  ASSERT_TRUE(topo.ok()) << topo.status();
  ASSERT_FALSE((*topo)->nodes().empty());
  int node = (*topo)->node_of_cpu((*topo)->cpus().front());
  EXPECT_GE(node, 0);
  EXPECT_TRUE((*topo)->has_node(node));
  EXPECT_THAT((*topo)->report(), ::testing::HasSubstr("numa nodes:"));
}

TEST(Topology, BindingTakesEffect) {
  auto topo = Topology::load();
  ASSERT_TRUE(topo.ok());
  int last = (*topo)->cpus().back();
  std::thread t([&] {
    ASSERT_TRUE((*topo)->bind_thread_to_cpu(last).ok());
    cpu_set_t set;
    ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
    EXPECT_EQ(CPU_COUNT(&set), 1);
    EXPECT_TRUE(CPU_ISSET(last, &set));
    EXPECT_EQ(current_cpu(), last);
  });
  t.join();
}

TEST(NumaSelection, AutoFollowsTheEngineCpu) {
  auto topo = Topology::load_synthetic("node:2 core:2 pu:1");
  ASSERT_TRUE(topo.ok()) << topo.status();
  ASSERT_EQ((*topo)->nodes().size(), 2u);
  EXPECT_EQ(*choose_numa_node({NumaPolicy::Kind::kAuto, -1}, **topo, 0), 0);
  EXPECT_EQ(*choose_numa_node({NumaPolicy::Kind::kAuto, -1}, **topo, 3), 1);
}

TEST(NumaSelection, ExplicitNodeIsCheckedAndNamed) {
  auto topo = Topology::load_synthetic("node:2 core:2 pu:1");
  ASSERT_TRUE(topo.ok());
  EXPECT_EQ(*choose_numa_node({NumaPolicy::Kind::kNode, 1}, **topo, 0), 1);
  auto bad = choose_numa_node({NumaPolicy::Kind::kNode, 7}, **topo, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("SLUICE_NUMA=7: numa node 7 does not exist"));
}

TEST(NumaSelection, NicFallsBackToAutoWithoutRdmaDevices) {
  auto topo = Topology::load_synthetic("node:2 core:2 pu:1");
  ASSERT_TRUE(topo.ok());
  ASSERT_TRUE((*topo)->rdma_devices().empty());
  EXPECT_EQ(*choose_numa_node({NumaPolicy::Kind::kNic, -1}, **topo, 2), 1);
}

}  // namespace
}  // namespace sluice::detail
