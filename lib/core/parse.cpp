// Unit-aware parsers for configuration values, and SLUICE_STATS_TRIGGER's list.
#include <cmath>
#include <csignal>
#include <cstdint>
#include <limits>
#include <string>

#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>
#include <sluice/config.h>
#include "core/config_table.h"
#include "core/strings.h"

namespace sluice {
namespace {

// Splits "12.5ms" into a non-negative decimal number and its unit. Accepts one optional
// decimal point; rejects signs, exponents and empty numbers.
struct Quantity {
  double value = 0;
  std::uint64_t integer = 0;  // exact value when there is no fraction
  bool has_fraction = false;
  std::string unit;
};

absl::StatusOr<Quantity> split_quantity(std::string_view text) {
  std::string_view s = sluice::detail::trim(text);
  if (s.empty()) return absl::InvalidArgumentError("empty value");
  std::size_t i = 0;
  Quantity q;
  bool any_digit = false;
  bool seen_point = false;
  std::uint64_t frac_num = 0, frac_den = 1;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c >= '0' && c <= '9') {
      any_digit = true;
      if (seen_point) {
        if (frac_den < 1'000'000'000'000ULL) {
          frac_num = frac_num * 10 + static_cast<unsigned>(c - '0');
          frac_den *= 10;
        }
      } else {
        if (q.integer > (std::numeric_limits<std::uint64_t>::max() - 9) / 10)
          return absl::InvalidArgumentError("number too large");
        q.integer = q.integer * 10 + static_cast<unsigned>(c - '0');
      }
    } else if (c == '.' && !seen_point) {
      seen_point = true;
    } else {
      break;
    }
  }
  if (!any_digit) return absl::InvalidArgumentError("not a number");
  q.has_fraction = frac_num != 0;
  q.value = static_cast<double>(q.integer) + static_cast<double>(frac_num) / static_cast<double>(frac_den);
  q.unit = sluice::detail::lower(s.substr(i));
  return q;
}

}  // namespace

absl::StatusOr<std::size_t> parse_size(std::string_view text) {
  auto q = split_quantity(text);
  if (!q.ok()) return q.status();
  std::string unit = q->unit;
  if (unit.size() >= 2 && unit.substr(unit.size() - 2) == "ib") unit.resize(unit.size() - 2);
  else if (!unit.empty() && unit.back() == 'b') unit.pop_back();
  std::uint64_t mult = 1;
  if (unit.empty()) mult = 1;
  else if (unit == "k") mult = 1ULL << 10;
  else if (unit == "m") mult = 1ULL << 20;
  else if (unit == "g") mult = 1ULL << 30;
  else if (unit == "t") mult = 1ULL << 40;
  else return absl::InvalidArgumentError(absl::StrFormat("unknown size unit '%s'", q->unit));
  if (!q->has_fraction) {
    if (q->integer > std::numeric_limits<std::uint64_t>::max() / mult)
      return absl::InvalidArgumentError("size too large");
    return static_cast<std::size_t>(q->integer * mult);
  }
  double bytes = q->value * static_cast<double>(mult);
  if (bytes >= 1.8e19) return absl::InvalidArgumentError("size too large");
  if (bytes != std::floor(bytes)) return absl::InvalidArgumentError("size is not a whole number of bytes");
  return static_cast<std::size_t>(bytes);
}

absl::StatusOr<Duration> parse_duration(std::string_view text) {
  auto q = split_quantity(text);
  if (!q.ok()) return q.status();
  double ns_per;
  if (q->unit == "ns") ns_per = 1;
  else if (q->unit == "us") ns_per = 1e3;
  else if (q->unit == "ms") ns_per = 1e6;
  else if (q->unit == "s") ns_per = 1e9;
  else if (q->unit == "m" || q->unit == "min") ns_per = 60e9;
  else if (q->unit.empty()) return absl::InvalidArgumentError("a duration needs a unit (ns, us, ms, s, m)");
  else return absl::InvalidArgumentError(absl::StrFormat("unknown time unit '%s'", q->unit));
  double ns = q->value * ns_per;
  if (ns >= 9.2e18) return absl::InvalidArgumentError("duration too large");
  return Duration(static_cast<std::int64_t>(std::llround(ns)));
}

absl::StatusOr<bool> parse_bool(std::string_view text) {
  std::string s = sluice::detail::lower(sluice::detail::trim(text));
  if (s == "y" || s == "yes" || s == "1" || s == "on" || s == "true") return true;
  if (s == "n" || s == "no" || s == "0" || s == "off" || s == "false") return false;
  return absl::InvalidArgumentError("not a boolean");
}

std::string format_size(std::size_t bytes) {
  static constexpr const char* kUnits[] = {"", "K", "M", "G", "T"};
  int u = 0;
  while (u < 4 && bytes != 0 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++u;
  }
  return absl::StrFormat("%u%s", bytes, kUnits[u]);
}

std::string format_duration(Duration d) {
  if (d == kInfinite) return "inf";
  std::int64_t ns = d.count();
  if (ns != 0 && ns % 1'000'000'000 == 0) return absl::StrFormat("%ds", ns / 1'000'000'000);
  if (ns != 0 && ns % 1'000'000 == 0) return absl::StrFormat("%dms", ns / 1'000'000);
  if (ns != 0 && ns % 1'000 == 0) return absl::StrFormat("%dus", ns / 1'000);
  return absl::StrFormat("%dns", ns);
}

namespace detail {

absl::StatusOr<StatsTrigger> parse_stats_trigger(std::string_view text) {
  StatsTrigger t;
  std::string all = lower(trim(text));
  if (all.empty() || all == "none") return t;
  for (std::size_t at = 0; at <= all.size();) {
    std::size_t comma = std::min(all.find(',', at), all.size());
    std::string_view item = trim(std::string_view(all).substr(at, comma - at));
    at = comma + 1;
    if (item == "exit") {
      t.at_exit = true;
    } else if (item == "signal:usr1" || item == "signal:sigusr1") {
      t.signal = SIGUSR1;
    } else if (item == "signal:usr2" || item == "signal:sigusr2") {
      t.signal = SIGUSR2;
    } else if (item.rfind("timer:", 0) == 0) {
      auto d = parse_duration(item.substr(6));
      if (!d.ok()) return absl::InvalidArgumentError(absl::StrFormat("%s: %s", item, d.status().message()));
      if (*d < std::chrono::milliseconds(10))
        return absl::InvalidArgumentError(absl::StrFormat("%s: below 10ms", item));
      t.every = *d;
    } else {
      return absl::InvalidArgumentError(
          absl::StrFormat("'%s' is not exit, signal:USR1, signal:USR2 or timer:DURATION", item));
    }
  }
  return t;
}

std::string format_stats_trigger(const StatsTrigger& t) {
  std::vector<std::string> items;
  if (t.signal == SIGUSR1) items.emplace_back("signal:USR1");
  if (t.signal == SIGUSR2) items.emplace_back("signal:USR2");
  if (t.every.count() != 0) items.push_back("timer:" + format_duration(t.every));
  if (t.at_exit) items.emplace_back("exit");
  return items.empty() ? "none" : absl::StrJoin(items, ",");
}

}  // namespace detail
}  // namespace sluice
