// MethodCounters' entries, and their reports.
#include "am/method_counters.h"

#include <absl/strings/str_format.h>

namespace sluice::detail {

MethodCounters::Method& MethodCounters::add(Side side, std::size_t method) {
  tables_[side][method] = std::make_unique<Method>();
  return *tables_[side][method];
}

std::vector<sluice::MethodStats> MethodCounters::snapshot() const {
  std::vector<sluice::MethodStats> out;
  for (Side side : {kClient, kServer}) {
    for (std::size_t id = 0; id < tables_[side].size(); ++id) {
      const Method* m = tables_[side][id].get();
      if (m == nullptr) continue;
      auto ns = [](std::uint64_t v) { return std::chrono::nanoseconds(v); };
      out.push_back({.method = static_cast<HandlerId>(id),
                     .server = side == kServer,
                     .calls = m->calls,
                     .errors = m->errors,
                     .timed = m->latency.count(),
                     .p50 = ns(m->latency.quantile(0.50)),
                     .p90 = ns(m->latency.quantile(0.90)),
                     .p99 = ns(m->latency.quantile(0.99)),
                     .max = ns(m->latency.max())});
    }
  }
  return out;
}

std::string MethodCounters::to_json() const {
  std::string out = "[";
  auto us = [](std::chrono::nanoseconds d) { return std::chrono::duration<double, std::micro>(d).count(); };
  for (const sluice::MethodStats& m : snapshot()) {
    absl::StrAppendFormat(&out,
                          "%s{\"method\": %d, \"side\": \"%s\", \"calls\": %u, \"errors\": %u, \"timed\": %u, "
                          "\"p50_us\": %.2f, \"p90_us\": %.2f, \"p99_us\": %.2f, \"max_us\": %.2f}",
                          out.size() > 1 ? ", " : "", m.method, m.server ? "server" : "client", m.calls, m.errors,
                          m.timed, us(m.p50), us(m.p90), us(m.p99), us(m.max));
  }
  return out + "]";
}

}  // namespace sluice::detail
