// An arena: memory Sluice maps itself, binds to a NUMA node, touches, and registers once.
#pragma once

#include <cstddef>
#include <memory>

#include <sluice/config.h>
#include <sluice/status.h>

#include "topo/topology.h"
#include "transport/transport.h"

namespace sluice::detail {

class Arena {
 public:
  // Maps at least `length` bytes (rounded up to the page size in use), with 2 MiB huge pages
  // per `huge`, binds them to `node` (-1: no binding), touches them and registers them with
  // `ucx` (when given; tests of placement may pass nullptr).
  static absl::StatusOr<std::unique_ptr<Arena>> create(std::size_t length, HugePages huge, int node,
                                                       const Topology* topo, const TransportContext* ucx);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  std::byte* data() const { return data_; }
  std::size_t length() const { return length_; }
  bool huge_pages() const { return huge_; }
  void* memh() const { return memory_.handle(); }

  static constexpr std::size_t kHugePage = std::size_t{2} << 20;
  static constexpr std::size_t kSmallPage = 4096;

 private:
  Arena() = default;
  std::byte* data_ = nullptr;
  std::size_t length_ = 0;
  bool huge_ = false;
  MemoryRegistration memory_;
};

}  // namespace sluice::detail
