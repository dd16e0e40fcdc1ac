// Per-method RPC counters (internal): for each method, the calls this engine made (client)
// and the requests it received (server), how many ended in an error, and a latency histogram
// of the timed ones: each method's first call, then one in 16, so that a method called once
// is still seen and a busy one pays for a clock read on one call in 16.
// Client latency runs from call() to the reply callback; server latency from the request's
// delivery to its handler until the reply is handed over (a handler may answer later).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <sluice/engine.h>
#include <sluice/stats.h>

#include "core/latency.h"

namespace sluice::detail {

class MethodCounters {
 public:
  enum Side : std::uint8_t { kClient = 0, kServer = 1 };

  // A call (client) or request (server) of `method` starts, and is counted: whether to time it.
  bool start(Side side, HandlerId method) { return (at(side, method).calls++ & kTimeMask) == 0; }
  // It ended with an error or was timed (the caller checks; an untimed success costs nothing):
  // `ok` (an OK status), and its latency in nanoseconds when it was timed (else 0).
  void end(Side side, HandlerId method, bool ok, std::uint64_t ns) {
    Method& m = at(side, method);
    if (!ok) ++m.errors;
    if (ns != 0) m.latency.record(ns);
  }
  // Every method called, client side first, by method.
  std::vector<sluice::MethodStats> snapshot() const;
  // The snapshot as a JSON array (the live-stats line's "methods").
  std::string to_json() const;

 private:
  static constexpr std::uint64_t kTimeMask = 15;
  struct Method {
    std::uint64_t calls = 0;
    std::uint64_t errors = 0;
    LatencyHistogram latency;
  };
  // Ids at or above kMaxHandlers (no handler can have them) share one entry, reported as
  // kMaxHandlers: a peer naming every id costs at most kMaxHandlers + 1 entries per side.
  Method& at(Side side, HandlerId id) {
    auto method = std::min<std::size_t>(id, kMaxHandlers);
    Method* m = tables_[side][method].get();
    if (m == nullptr) [[unlikely]]
      return add(side, method);
    return *m;
  }
  Method& add(Side side, std::size_t method);

  // By side, then id; an entry is made when its method is first called.
  std::array<std::array<std::unique_ptr<Method>, kMaxHandlers + 1>, 2> tables_;
};

}  // namespace sluice::detail
