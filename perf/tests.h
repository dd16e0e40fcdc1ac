// sluice-perf's tests, in one table (in the spirit of ucx_perftest's tests[]): each test's
// name, what it measures, which side does what, its defaults, its baseline and the functions
// that run it. The option parser, the help text, the rows, the ratios and the dispatch all
// read this table; a test is added by adding an entry (and its Bench function).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include <sluice/sluice.h>

namespace sluice::perf {

class Bench;   // bench.h
class RawUcx;  // raw_ucx.h
class Link;    // connect.h
struct Cmd;    // rows.h
struct Figures;
struct Row;
struct Options;

// What a test's headline figure is, and so what its ratio (Sluice / baseline) compares.
enum class Mode {
  kLatency,        // median latency: below 1 is better
  kRate,           // messages or calls per second: above 1 is better
  kBandwidth,      // MB/s (message rate up to 4 KiB, where bandwidth is small): above 1 is better
  kLoadedLatency,  // p99 latency while other traffic runs / p99 without it
  kMemory,         // receive memory's high-water mark / its budget
};

// Whose figures a row's baseline columns hold.
enum class Baseline {
  kChosen,       // --baseline's: raw UCX, Sluice's bounce mode, or none
  kEngineAlone,  // the engine thread sending the same messages itself, whatever --baseline says
  kIdle,         // the same calls without the other traffic, whatever --baseline says
  kBudget,       // the receive budget; with --baseline ucx, raw UCX's run is reported beside
  kSolo,         // crowd: the busy clients' calls before any idle client connects
};

// What Open MPI's baseline of a test runs (--baseline mpi; sluice-perf-mpi's patterns): the
// same exchange as the raw UCX loop's.
enum class MpiPattern {
  kNone,       // no MPI part
  kOneWay,     // echoes of SIZE bytes, half the round trip (am_lat)
  kRoundTrip,  // echoes of SIZE bytes, the round trip (rpc_lat)
  kRead,       // 8 bytes there, SIZE back from the other side's own buffer
  kWrite,      // SIZE bytes there, 8 back
  kStream,     // a stream of SIZE bytes, WINDOW in flight
  kWindow,     // WINDOW echoes of SIZE bytes in flight
};

// Sizes without -s: the small-message tests' (a static array: a table entry's sizes outlive it).
inline constexpr std::size_t kSmallSizes[] = {8};

// One test. Fields left out of an entry take the defaults below.
struct Test {
  const char* name;
  Mode mode;
  const char* measures;  // what the figure is, for --help
  const char* sides;     // which side does what (0: rank 0 or the client; 1: rank 1 or the server)
  Baseline baseline = Baseline::kChosen;
  bool by_default = false;  // runs without -t
  bool alone = false;       // runs on its own (crowd, its own processes): -t NAME, not in -t all
  int min_sides = 2;        // fewer sides: the row is skipped
  // Operations in flight: `window` unless -W applies (`takes_window`) and is given.
  int window = 1;
  bool takes_window = false;
  std::span<const std::size_t> sizes = kSmallSizes;    // without -s
  int iters = 20000;                                   // without -n, at most (fewer for large sizes)
  std::size_t bytes_per_rep = std::size_t{256} << 20;  // -n's default moves about this much per repetition
  bool until_done = false;    // the answering sides serve until the driver says the test is over
  bool driver_holds = false;  // the driver holds what arrives from the first message on (fanin)
  Figures (Bench::*run)(Engine& e, const Cmd& c) = nullptr;          // Sluice, on every side; crowd: none
  Figures (RawUcx::*raw)(const Cmd& c, const Link& link) = nullptr;  // raw UCX's; nullptr: none
  MpiPattern mpi = MpiPattern::kNone;                                // Open MPI's
  std::string (*note)(const Row& r, const Options& o) = nullptr;     // the row's words; nullptr: none
};

// How long fanin's receiver leaves what arrives unfinished before it catches up.
constexpr std::chrono::milliseconds kFaninHold{200};
// The messages mixed's streaming ranks send.
constexpr std::size_t kMixedStreamSize = std::size_t{2} << 20;

// Every test, in the order -t all runs them and --help lists them.
std::span<const Test> tests();
// The test named `name`; nullptr when there is none.
const Test* find_test(std::string_view name);
// "am_lat, am_bw, ...": every test's name, for messages.
std::string test_names();
// Per mode, its tests and what their ratio compares, a line each starting with `prefix`.
void print_ratios(FILE* out, const char* prefix);
// The tests whose baseline is their own whatever --baseline says, and what it is.
void print_baselines(FILE* out, const char* prefix);

}  // namespace sluice::perf
