// Probe points (internal): time stamps (the TSC) along the path of a latency round, for finding
// where its cycles go. Compiled in only with the meson option -Dprobes=true
// (SLUICE_PROBES=1), which no default build has; otherwise every call below is discarded at
// compile time but still type-checked, so the probes cannot rot.
//
// A round, on each rank: the transport's receive callback (kRxCallback), the engine taking the
// completion (kRxTaken), the handler called (kHandler), the end of that progress() call
// (kProgressEnd, where the initiating rank's next send usually follows), the next send handed
// to the transport (round_end). At exit each process prints the mean cycles of each segment
// over the rounds it saw, dropping rounds whose whole span exceeds 20,000 cycles (a
// preemption or a timer tick). A stamp costs ~26 cycles itself on the machine of
// docs/performance.md.
#pragma once

#include <cstdint>

#ifndef SLUICE_PROBES
#define SLUICE_PROBES 0
#endif

namespace sluice::detail::probe {

inline constexpr bool kBuilt = SLUICE_PROBES != 0;

enum Point : int { kRxCallback, kRxTaken, kHandler, kProgressEnd, kPoints };

void stamp_now(Point p);
void progress_end_now();
void round_end_now();

inline void stamp(Point p) {
  if constexpr (kBuilt) stamp_now(p);
}
inline void progress_end() {
  if constexpr (kBuilt) progress_end_now();
}
inline void round_end() {
  if constexpr (kBuilt) round_end_now();
}

}  // namespace sluice::detail::probe
