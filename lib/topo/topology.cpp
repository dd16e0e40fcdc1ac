#include "topo/topology.h"

#include <hwloc.h>
#include <sched.h>

#include <cstring>
#include <mutex>

#include <absl/strings/str_format.h>

#include "core/log.h"

namespace sluice::detail {

struct Topology::HwlocOwner {
  hwloc_topology_t topo = nullptr;
  ~HwlocOwner() {
    if (topo != nullptr) hwloc_topology_destroy(topo);
  }
};

namespace {
struct Bitmap {
  hwloc_bitmap_t b = hwloc_bitmap_alloc();
  ~Bitmap() { hwloc_bitmap_free(b); }
  Bitmap() = default;
  Bitmap(const Bitmap&) = delete;
  Bitmap& operator=(const Bitmap&) = delete;
};

std::vector<int> bitmap_indexes(hwloc_const_bitmap_t set) {
  std::vector<int> out;
  unsigned i;
  hwloc_bitmap_foreach_begin(i, set) { out.push_back(static_cast<int>(i)); }
  hwloc_bitmap_foreach_end();
  return out;
}
}  // namespace

Topology::~Topology() = default;

absl::StatusOr<std::unique_ptr<Topology>> Topology::load() {
  std::unique_ptr<Topology> t(new Topology());
  SLUICE_RETURN_IF_ERROR(t->init(nullptr));
  return t;
}

absl::StatusOr<std::unique_ptr<Topology>> Topology::load_synthetic(const std::string& desc) {
  std::unique_ptr<Topology> t(new Topology());
  SLUICE_RETURN_IF_ERROR(t->init(&desc));
  return t;
}

absl::Status Topology::init(const std::string* synthetic) {
  hw_ = std::make_unique<HwlocOwner>();
  if (hwloc_topology_init(&hw_->topo) != 0) {
    hw_->topo = nullptr;
    return absl::InternalError("hwloc_topology_init failed");
  }
  if (synthetic != nullptr) {
    if (hwloc_topology_set_synthetic(hw_->topo, synthetic->c_str()) != 0)
      return absl::InvalidArgumentError("bad synthetic topology: " + *synthetic);
  } else {
    hwloc_topology_set_io_types_filter(hw_->topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  }
  if (hwloc_topology_load(hw_->topo) != 0) return absl::InternalError("hwloc_topology_load failed");

  int n = hwloc_get_nbobjs_by_type(hw_->topo, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < n; ++i) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(hw_->topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    nodes_.push_back({static_cast<int>(obj->os_index), bitmap_indexes(obj->cpuset),
                      static_cast<std::size_t>(obj->attr->numanode.local_memory)});
  }
  for (hwloc_obj_t dev = hwloc_get_next_osdev(hw_->topo, nullptr); dev != nullptr;
       dev = hwloc_get_next_osdev(hw_->topo, dev)) {
    if (dev->attr->osdev.type != HWLOC_OBJ_OSDEV_OPENFABRICS) continue;
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(hw_->topo, dev);
    int node = -1;
    if (anc != nullptr && anc->nodeset != nullptr && hwloc_bitmap_weight(anc->nodeset) == 1)
      node = hwloc_bitmap_first(anc->nodeset);
    rdma_.push_back({dev->name != nullptr ? dev->name : "?", node});
  }
  return absl::OkStatus();
}

bool Topology::has_node(int os_index) const {
  for (const auto& n : nodes_)
    if (n.os_index == os_index) return true;
  return false;
}

std::vector<int> Topology::cpus() const { return bitmap_indexes(hwloc_topology_get_topology_cpuset(hw_->topo)); }

int Topology::node_of_cpu(int cpu) const {
  for (const auto& n : nodes_)
    for (int c : n.cpus)
      if (c == cpu) return n.os_index;
  return -1;
}

absl::Status Topology::bind_thread_to_cpu(int cpu) const {
  Bitmap set;
  hwloc_bitmap_only(set.b, static_cast<unsigned>(cpu));
  if (hwloc_set_cpubind(hw_->topo, set.b, HWLOC_CPUBIND_THREAD) != 0)
    return absl::InternalError(absl::StrFormat("cannot bind thread to cpu %d: %s", cpu, strerror(errno)));
  return absl::OkStatus();
}

absl::Status Topology::bind_thread_to_node(int node) const {
  for (const auto& n : nodes_) {
    if (n.os_index != node) continue;
    Bitmap set;
    for (int c : n.cpus) hwloc_bitmap_set(set.b, static_cast<unsigned>(c));
    if (hwloc_set_cpubind(hw_->topo, set.b, HWLOC_CPUBIND_THREAD) != 0)
      return absl::InternalError(absl::StrFormat("cannot bind thread to node %d: %s", node, strerror(errno)));
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrFormat("numa node %d does not exist", node));
}

absl::Status Topology::bind_memory(void* addr, std::size_t len, int node) const {
  Bitmap set;
  hwloc_bitmap_only(set.b, static_cast<unsigned>(node));
  if (hwloc_set_area_membind(hw_->topo, addr, len, set.b, HWLOC_MEMBIND_BIND,
                             HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_STRICT) != 0) {
    return absl::InternalError(absl::StrFormat("cannot bind %u bytes to numa node %d: %s", len, node, strerror(errno)));
  }
  return absl::OkStatus();
}

int Topology::node_of_memory(const void* addr, std::size_t len) const {
  Bitmap set;
  if (hwloc_get_area_memlocation(hw_->topo, addr, len, set.b, HWLOC_MEMBIND_BYNODESET) != 0) return -1;
  if (hwloc_bitmap_weight(set.b) != 1) return -1;
  return hwloc_bitmap_first(set.b);
}

std::string Topology::report() const {
  std::string out;
  absl::StrAppendFormat(&out, "numa nodes: %u\n", nodes_.size());
  for (const auto& n : nodes_) {
    std::string cpus;
    for (int c : n.cpus) absl::StrAppendFormat(&cpus, "%s%d", cpus.empty() ? "" : ",", c);
    absl::StrAppendFormat(&out, "  node %d: cpus %s, memory %s\n", n.os_index, cpus, format_size(n.memory_bytes));
  }
  if (rdma_.empty()) {
    out += "rdma devices: none (shared memory and tcp only)\n";
  } else {
    absl::StrAppendFormat(&out, "rdma devices: %u\n", rdma_.size());
    for (const auto& d : rdma_) absl::StrAppendFormat(&out, "  %s: numa node %d\n", d.name, d.numa_node);
  }
  return out;
}

int current_cpu() { return sched_getcpu(); }

absl::StatusOr<int> choose_numa_node(const NumaPolicy& policy, const Topology& topo, int engine_cpu,
                                     const std::string& device) {
  auto auto_node = [&]() -> int {
    int node = topo.node_of_cpu(engine_cpu);
    if (node < 0 && !topo.nodes().empty()) node = topo.nodes().front().os_index;
    return node;
  };
  switch (policy.kind) {
    case NumaPolicy::Kind::kAuto: return auto_node();
    case NumaPolicy::Kind::kNic: {
      for (const auto& d : topo.rdma_devices()) {
        if ((device.empty() || d.name == device) && d.numa_node >= 0) return d.numa_node;
      }
      static std::once_flag once;
      std::call_once(once,
                     [] { SLUICE_LOG(kInfo, "topo", "SLUICE_NUMA=nic: no rdma device with a numa node, using auto"); });
      return auto_node();
    }
    case NumaPolicy::Kind::kNode:
      if (!topo.has_node(policy.node)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("SLUICE_NUMA=%d: numa node %d does not exist (this machine has %u node%s)", policy.node,
                            policy.node, topo.nodes().size(), topo.nodes().size() == 1 ? "" : "s"));
      }
      return policy.node;
  }
  return absl::InternalError("bad numa policy");
}

}  // namespace sluice::detail
