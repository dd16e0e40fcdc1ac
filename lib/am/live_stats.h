// Live counters (internal): when an engine writes its counters as a JSON line
// (SLUICE_STATS_TRIGGER) and where the line goes (SLUICE_STATS_DEST). The engine asks due() at
// each timer tick, never on the hot path; a signal only bumps a process-wide count.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <sluice/config.h>

#include <sluice/engine.h>

namespace sluice::detail {

class LiveStats {
 public:
  // Installs the trigger's signal handler once per process, unless the application has one.
  LiveStats(const StatsTrigger& trigger, std::string dest, Clock::time_point now);
  ~LiveStats();
  LiveStats(const LiveStats&) = delete;
  LiveStats& operator=(const LiveStats&) = delete;

  // The trigger that is due at `now` ("signal" or "timer"), or nullptr; due() consumes it.
  const char* due(Clock::time_point now);
  // When the timer trigger is next due (time_point::max() without one).
  Clock::time_point next_due() const { return next_; }
  bool at_exit() const { return trigger_.at_exit; }

  // Appends `line` and a newline to the destination in one write. A file that cannot be
  // opened is said once, and its lines go to stderr instead.
  void write(std::string_view line);

 private:
  StatsTrigger trigger_;
  std::string dest_;
  int fd_ = -1;  // -1 until the first line; stderr's 2 is not closed
  std::uint64_t signals_seen_ = 0;
  Clock::time_point next_ = Clock::time_point::max();
};

// The host name (gethostname), cached; for stats lines and file names.
const std::string& host_name();

// "2026-12-02T02:10:00.123Z": UTC wall clock, milliseconds.
std::string utc_timestamp();

// `s` as the inside of a JSON string: quotes, backslashes and control characters escaped.
std::string json_escape(std::string_view s);

}  // namespace sluice::detail
