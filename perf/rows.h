// sluice-perf's rows: each test of the command line at each of its sizes, run -r times (Sluice
// and its baseline alternating), reduced to medians and a ratio, and printed as each is done.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "options.h"
#include "report.h"

namespace sluice::perf {

// What runs a Cmd's test.
enum class RunOn : std::int32_t {
  kSluice,       // the main engine
  kRaw,          // raw UCX (the test's raw loop)
  kBounce,       // the bounce baseline's engine (SLUICE_RNDV=n)
  kQuit,         // nothing: the other sides stop serving
  kEngineAlone,  // the main engine, its thread sending alone (am_submit's baseline)
};

// What the driving side tells the other sides to run.
struct Cmd {
  char test[16];  // Test::name
  std::uint64_t size;
  std::int32_t iters, warmup, window;
  RunOn mode;
};

// Measures every row of `o` through `drive` (which runs one Cmd on every side and returns the
// driving side's figures), with `sides` processes taking part, printing each row as it is
// done (table and CSV). Returns the rows.
std::vector<Row> measure(const Options& o, int sides, const std::function<Figures(const Cmd&)>& drive);

}  // namespace sluice::perf
