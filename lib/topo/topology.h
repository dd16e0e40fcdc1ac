// Machine topology (internal): the one place that includes hwloc.
//
// NUMA nodes with their CPUs and memory, the node of a CPU, RDMA devices and their nodes
// (from hwloc's I/O discovery, which reads the same sysfs rdma-core does), thread binding,
// and memory placement of an address range.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <sluice/config.h>
#include <sluice/status.h>

namespace sluice::detail {

struct NumaNode {
  int os_index;
  std::vector<int> cpus;
  std::size_t memory_bytes;
};

struct RdmaDevice {
  std::string name;
  int numa_node;  // -1 when the device is not attached to one node
};

class Topology {
 public:
  // The machine's topology (honours HWLOC_SYNTHETIC / HWLOC_XMLFILE like every hwloc tool).
  static absl::StatusOr<std::unique_ptr<Topology>> load();
  // A synthetic topology, e.g. "node:2 core:2 pu:1", for tests of selection logic.
  static absl::StatusOr<std::unique_ptr<Topology>> load_synthetic(const std::string& desc);
  ~Topology();

  const std::vector<NumaNode>& nodes() const { return nodes_; }
  const std::vector<RdmaDevice>& rdma_devices() const { return rdma_; }
  bool has_node(int os_index) const;
  // All processing units (OS indexes) the machine has.
  std::vector<int> cpus() const;
  // The node holding `cpu`, or -1 when unknown.
  int node_of_cpu(int cpu) const;

  // Binds the calling thread to one CPU / to the CPUs of one node.
  absl::Status bind_thread_to_cpu(int cpu) const;
  absl::Status bind_thread_to_node(int node) const;

  // Sets the memory policy of [addr, addr+len) to `node` (strict bind). Call before the pages
  // are touched.
  absl::Status bind_memory(void* addr, std::size_t len, int node) const;
  // The node holding the (touched) pages of [addr, addr+len), -1 when mixed or unknown.
  int node_of_memory(const void* addr, std::size_t len) const;

  // Human-readable summary, for sluice-info -t.
  std::string report() const;

 private:
  Topology() = default;
  absl::Status init(const std::string* synthetic);
  struct HwlocOwner;
  std::unique_ptr<HwlocOwner> hw_;
  std::vector<NumaNode> nodes_;
  std::vector<RdmaDevice> rdma_;
};

// The CPU the calling thread runs on now.
int current_cpu();

// Chooses the NUMA node for an engine's pools (SLUICE_NUMA). `engine_cpu` is the CPU of the
// engine's thread; `device` names the RDMA device it uses (empty: none / the first one).
// Errors name SLUICE_NUMA and the node that does not exist.
absl::StatusOr<int> choose_numa_node(const NumaPolicy& policy, const Topology& topo, int engine_cpu,
                                     const std::string& device = {});

}  // namespace sluice::detail
