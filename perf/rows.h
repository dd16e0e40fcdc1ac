// sluice-perf's rows: each test of the command line at each of its sizes, run -r times (Sluice
// and its baseline alternating), reduced to medians and a ratio, and printed as each is done.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "options.h"
#include "report.h"

namespace sluice::perf {

// What the driving side tells the other sides to run.
struct Cmd {
  char test[16];
  std::uint64_t size;
  // mode 0 sluice, 1 raw ucx, 2 bounce engine, 3 quit, 4 am_submit's engine thread alone
  std::int32_t iters, warmup, window, mode;
};
// Cmd::mode of am_submit's baseline: the engine thread sends alone.
constexpr std::int32_t kEngineAlone = 4;

// Measures every row of `o` through `drive` (which runs one Cmd on every side and returns the
// driving side's figures), with `sides` processes taking part, printing each row as it is
// done (table and CSV). Returns the rows.
std::vector<Row> measure(const Options& o, int sides, const std::function<Figures(const Cmd&)>& drive);

}  // namespace sluice::perf
