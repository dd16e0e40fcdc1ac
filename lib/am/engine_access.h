// What testing.h's observers and the engine's component tests read of an Engine (internal):
// EngineAccess is a friend of Engine and of EngineCore.
#pragma once

#include <cstddef>

#include <sluice/engine.h>

#include "am/engine_core.h"

namespace sluice::detail {

struct EngineAccess {
  static EngineCore& core(const Engine& e) { return *e.core_; }
  static std::size_t outstanding_sends(const EngineCore& core) {
    return core.sender_.inflight() + core.control_.inflight();
  }
  static std::size_t posted_exact_receives(const EngineCore& core) { return core.exact_posted_; }
  static std::size_t watched_peers(const EngineCore& core) { return core.link_.watched(); }
  static std::size_t receive_slots_held(const EngineCore& core, int rank) {
    return core.peers_.at(static_cast<std::uint32_t>(rank)).posted.held();
  }
};

}  // namespace sluice::detail
