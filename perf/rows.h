// sluice-perf's rows: each test of the command line at each of its sizes, run -r times (Sluice
// and its baseline alternating), reduced to medians and a ratio, and printed as each is done.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <sluice/status.h>

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
  kMpiOb1,       // an Open MPI job on the driver's host, pml ob1; the other sides sleep
  kMpiUcx,       // the same, pml ucx
};

inline bool is_mpi(RunOn m) { return m == RunOn::kMpiOb1 || m == RunOn::kMpiUcx; }

// What the driving side tells the other sides to run.
struct Cmd {
  char test[16];  // Test::name
  std::uint64_t size;
  std::int32_t iters, warmup, window;
  RunOn mode;
};

// Runs one Cmd on every side and returns the driving side's figures; an error only from a
// baseline that could not run (an MPI job's), which its rows report.
using Drive = std::function<absl::StatusOr<Figures>(const Cmd&)>;

// Measures every row of `o` through `drive`, with `sides` processes taking part, printing each
// row as it is done (table and CSV). With --baseline mpi, a test with an MPI part has a row
// per pml. Returns the rows.
std::vector<Row> measure(const Options& o, int sides, const Drive& drive);

}  // namespace sluice::perf
