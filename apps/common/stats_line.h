// A live stats line (docs/stats.md), as sluice-run --stats and sluice-stats read it: one JSON
// object a line, of which they keep the fields that say whose counters they are, and the
// counters. Input is bounded: a line longer than kMaxStatsLine is refused, never held.
#pragma once

#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::tools {

// A line of a few hundred counters and 8 peers is about 6 KiB.
inline constexpr std::size_t kMaxStatsLine = std::size_t{256} << 10;

struct StatsLine {
  std::string trigger;  // "exit", "signal", "timer"
  long long rank = -1;  // -1: the line has none (a single-rank or client/server process)
  std::string host;
  long long pid = -1;
  std::map<std::string, unsigned long long> counters;
};

// The line's fields, or nullopt with `why` saying what is wrong ("counter 'x' is not a
// whole number", "not a JSON object"): the line must be one JSON object with a
// "counters" object of non-negative whole numbers.
std::optional<StatsLine> parse_stats_line(std::string_view text, std::string* why);

// Reads the next line of `in` (without its newline) into `line`; false at the end of input. A
// line longer than kMaxStatsLine sets `too_long` and is skipped, not stored.
bool next_line(std::FILE* in, std::string* line, bool* too_long);

}  // namespace sluice::tools
