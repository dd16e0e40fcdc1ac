// sluice/stats.h — named counters and high-water marks; per-method RPC statistics.
//
// A Stats registry belongs to one engine and is written only by the engine's thread: a counter
// is a plain integer, so counting costs one add on the hot path. Read it on the engine thread
// (Engine::stats(), or from a function given to Engine::post()).
//
// Names are dotted paths: "am.msgs_sent", "mem.recv.eager.hwm", "flow.credit_stalls"; every
// counter an engine keeps, and what it counts, is listed in docs/stats.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sluice/api.h>

namespace sluice {

class SLUICE_API Counter {
 public:
  void add(std::uint64_t n = 1) { value_ += n; }
  void set(std::uint64_t v) { value_ = v; }  // for gauges (slots free, peers connected)
  std::uint64_t value() const { return value_; }

 private:
  std::uint64_t value_ = 0;
};

class SLUICE_API HighWater {
 public:
  void update(std::uint64_t v) {
    if (v > value_) value_ = v;
  }
  std::uint64_t value() const { return value_; }

 private:
  std::uint64_t value_ = 0;
};

// One RPC method's calls as one side saw them (Engine::method_stats(), and the "methods" of a
// live-stats line). Latency is measured on the method's first call and one in 16 after it:
// a client's from call() to its reply callback, a server's from the request's delivery to
// its handler until the reply is handed over. Percentiles are upper bounds within 12.5 %.
struct MethodStats {
  std::uint16_t method = 0;  // the HandlerId; kMaxHandlers stands for every id at or above it
  bool server = false;       // true: requests this engine answered; false: calls it made
  std::uint64_t calls = 0;   // made (call() returned kOk) or received; some may not have ended yet
  std::uint64_t errors = 0;  // of those ended, with a status other than OK
  std::uint64_t timed = 0;   // of them, with their latency measured
  std::chrono::nanoseconds p50{0}, p90{0}, p99{0}, max{0};  // of the timed ones; 0 with none
};

class SLUICE_API Stats {
 public:
  struct Entry {
    std::string name;
    std::uint64_t value;
  };

  // Returns the counter named `name`, creating it at 0. The reference stays valid for the
  // registry's lifetime; keep it rather than looking the name up on a hot path.
  Counter& counter(std::string_view name);
  HighWater& high_water(std::string_view name);

  // The current value of `name`, 0 when it does not exist.
  std::uint64_t value(std::string_view name) const;

  // Counters by index: 0 .. size()-1 in the order they were made. An index names the same
  // counter for the registry's life (none is ever removed), so a reader may look a name up
  // once and read by index after (the C API's stat ids).
  std::size_t size() const { return entries_.size(); }
  std::optional<std::size_t> index_of(std::string_view name) const;
  std::string_view name_at(std::size_t index) const { return entries_[index].name; }
  std::uint64_t value_at(std::size_t index) const;

  std::vector<Entry> snapshot() const;  // sorted by name
  std::string to_text() const;          // "name value" lines
  std::string to_json() const;          // {"name": value, ...}

 private:
  struct Named {
    std::string name;
    Counter counter;
    HighWater hwm;
    bool is_hwm;
  };
  Named* find(std::string_view name);
  const Named* find(std::string_view name) const;
  std::deque<Named> entries_;  // deque: references stay valid as it grows
};

}  // namespace sluice
