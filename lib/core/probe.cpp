// The probe points' stamps and their report (probe.h).
#include "core/probe.h"

#include <cstdio>

namespace sluice::detail::probe {
namespace {

std::uint64_t tsc() { return __builtin_ia32_rdtsc(); }

struct Rounds {
  std::uint64_t at[kPoints] = {};
  std::uint64_t sum[5] = {};
  std::uint64_t n = 0, n_end = 0;
  ~Rounds() {
    if (n == 0) return;
    auto mean = [](std::uint64_t s, std::uint64_t k) {
      return k ? static_cast<double>(s) / static_cast<double>(k) : 0.0;
    };
    std::fprintf(stderr,
                 "sluice probes: %lu rounds: callback->taken %.1f taken->handler %.1f handler->send %.1f "
                 "total %.1f cycles | %lu with progress end: handler->end %.1f end->send %.1f\n",
                 static_cast<unsigned long>(n), mean(sum[0], n), mean(sum[1], n), mean(sum[2], n),
                 mean(sum[0] + sum[1] + sum[2], n), static_cast<unsigned long>(n_end), mean(sum[3], n_end),
                 mean(sum[4], n_end));
  }
};
Rounds rounds;  // one engine per process is what a latency run has

}  // namespace

void stamp_now(Point p) { rounds.at[p] = tsc(); }

void progress_end_now() {
  if (rounds.at[kHandler] != 0 && rounds.at[kProgressEnd] == 0) rounds.at[kProgressEnd] = tsc();
}

void round_end_now() {
  std::uint64_t now = tsc();
  const std::uint64_t* t = rounds.at;
  if (t[kRxCallback] != 0 && t[kRxTaken] >= t[kRxCallback] && t[kHandler] >= t[kRxTaken] && now >= t[kHandler] &&
      now - t[kRxCallback] < 20000) {
    rounds.sum[0] += t[kRxTaken] - t[kRxCallback];
    rounds.sum[1] += t[kHandler] - t[kRxTaken];
    rounds.sum[2] += now - t[kHandler];
    ++rounds.n;
    if (t[kProgressEnd] >= t[kHandler] && now >= t[kProgressEnd]) {
      rounds.sum[3] += t[kProgressEnd] - t[kHandler];
      rounds.sum[4] += now - t[kProgressEnd];
      ++rounds.n_end;
    }
  }
  for (std::uint64_t& v : rounds.at) v = 0;
}

}  // namespace sluice::detail::probe
