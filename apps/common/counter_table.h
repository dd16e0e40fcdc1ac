// The table sluice-run --stats and sluice-stats print: per counter, the sum over a job's ranks
// (or processes) and the ones with the least and the most.
#pragma once

#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::tools {

// Whose counters ("rank 3", "vm:4242") and their sums over its engines.
struct CounterSource {
  std::string label;
  std::map<std::string, unsigned long long> counters;
};

// The column heads and a row per counter (a counter a source lacks counts 0 there); counters
// that are 0 everywhere are counted in one line, not listed.
void print_counter_table(std::FILE* out, const std::vector<CounterSource>& sources);

// "2, 5, 7"
std::string list_ranks(const std::vector<long long>& ranks);

// `s` fit for a message: at most `max` characters, anything not printable as '?'.
std::string printable(std::string_view s, std::size_t max = 200);

}  // namespace sluice::tools
