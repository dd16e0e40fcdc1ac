#include "common/counter_table.h"

#include <cctype>
#include <climits>

namespace sluice::tools {
namespace {

struct Spread {
  unsigned long long sum = 0, min = 0, max = 0;
  const std::string* min_of = nullptr;
  const std::string* max_of = nullptr;
  void add(const std::string& who, unsigned long long v) {
    sum = v > ULLONG_MAX - sum ? ULLONG_MAX : sum + v;  // a hostile value does not wrap the sum
    if (min_of == nullptr || v < min) min = v, min_of = &who;
    if (max_of == nullptr || v > max) max = v, max_of = &who;
  }
};

}  // namespace

void print_counter_table(std::FILE* out, const std::vector<CounterSource>& sources) {
  std::map<std::string, Spread> job;
  for (const auto& s : sources)
    for (const auto& kv : s.counters) job[kv.first];
  for (const auto& s : sources)
    for (auto& [name, spread] : job) {
      auto it = s.counters.find(name);
      spread.add(s.label, it == s.counters.end() ? 0 : it->second);
    }
  std::fprintf(out, "  %-40s %16s %16s %-9s %16s %s\n", "counter", "sum", "min", "(rank)", "max", "(rank)");
  int zero = 0;
  for (const auto& [name, s] : job) {
    if (s.max == 0) {
      ++zero;
      continue;
    }
    std::fprintf(out, "  %-40s %16llu %16llu (%s) %16llu (%s)\n", name.c_str(), s.sum, s.min, s.min_of->c_str(), s.max,
                 s.max_of->c_str());
  }
  if (zero > 0) std::fprintf(out, "  (%d more counters are 0 on every rank)\n", zero);
}

std::string list_ranks(const std::vector<long long>& ranks) {
  std::string s;
  for (long long r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

std::string printable(std::string_view s, std::size_t max) {
  std::string out;
  for (char c : s.substr(0, max)) out += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  if (s.size() > max) out += "...";
  return out;
}

}  // namespace sluice::tools
