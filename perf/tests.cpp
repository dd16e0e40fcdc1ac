#include "tests.h"

#include <algorithm>
#include <cstdio>

#include "bench.h"
#include "raw_ucx.h"
#include "report.h"

namespace sluice::perf {
namespace {

constexpr std::size_t kKi = 1024, kMi = kKi * 1024, kGi = kMi * 1024;

// Sizes without -s of the tests that move large payloads, and of fanin.
constexpr std::size_t kLargeSizes[] = {64 * kKi, kMi};
constexpr std::size_t kBulkSizes[] = {64 * kKi, kMi, 16 * kMi};
constexpr std::size_t kFaninSizes[] = {1024};
constexpr std::size_t kRpcLatSizes[] = {0, 8};  // an empty request and reply, and 8-byte bodies

// The window of the tests -W applies to, without it (bulk_bw's is 16).
constexpr int kWindow = 64;

const Test kTests[] = {
    {.name = "am_lat",
     .mode = Mode::kLatency,
     .measures = "one-way latency of a message (half the round trip)",
     .sides = "0 sends SIZE bytes; 1's handler sends them back",
     .by_default = true,
     .until_done = true,
     .run = &Bench::am_lat,
     .raw = &RawUcx::run_am_lat,
     .mpi = MpiPattern::kOneWay},
    {.name = "am_bw",
     .mode = Mode::kBandwidth,
     .measures = "message rate and bandwidth of a stream, WINDOW in flight",
     .sides = "0 sends; 1's handler counts, and 1 acknowledges the last",
     .by_default = true,
     .window = kWindow,
     .takes_window = true,
     .iters = 200000,
     .bytes_per_rep = 2 * kGi,
     .run = &Bench::am_bw,
     .raw = &RawUcx::run_stream,
     .mpi = MpiPattern::kStream},
    {.name = "am_submit",
     .mode = Mode::kRate,
     .measures = "message rate of copies handed to the engine through Engine::submit()",
     .sides = "P threads of 0 submit while 0's main thread drives the engine; 1 counts",
     .baseline = Baseline::kEngineAlone,
     .window = 0,  // none: the submit queue and the send queue bound what waits
     .iters = 100000,
     .run = &Bench::am_submit,
     .note = &submit_note},
    {.name = "rpc_lat",
     .mode = Mode::kLatency,
     .measures = "round trip of a call",
     .sides = "0 calls with SIZE bytes; 1 replies with the request's payload",
     .by_default = true,
     .sizes = kRpcLatSizes,
     .run = &Bench::rpc_lat,
     .raw = &RawUcx::run_rpc_lat,
     .mpi = MpiPattern::kRoundTrip},
    {.name = "rpc_rate",
     .mode = Mode::kRate,
     .measures = "calls per second, WINDOW in flight (the server grants SLUICE_RPC_WINDOW)",
     .sides = "0 calls with SIZE bytes; 1 replies with the request's payload",
     .window = kWindow,
     .takes_window = true,
     .iters = 50000,
     .run = &Bench::rpc_rate,
     .raw = &RawUcx::run_rpc_rate,
     .mpi = MpiPattern::kWindow},
    {.name = "read",
     .mode = Mode::kLatency,
     .measures = "round trip of a storage read",
     .sides = "0 asks for SIZE bytes in an 8-byte request; 1 replies from its block",
     .sizes = kLargeSizes,
     .run = &Bench::read,
     .raw = &RawUcx::run_read,
     .mpi = MpiPattern::kRead},
    {.name = "write",
     .mode = Mode::kLatency,
     .measures = "round trip of a storage write",
     .sides = "0 sends SIZE bytes into 1's sink; 1 replies 8 bytes",
     .sizes = kLargeSizes,
     .run = &Bench::write,
     .raw = &RawUcx::run_write,
     .mpi = MpiPattern::kWrite},
    {.name = "bulk_bw",
     .mode = Mode::kBandwidth,
     .measures = "bandwidth of large messages, WINDOW in flight",
     .sides = "0 sends; 1's handler takes them into its own buffer and counts",
     .by_default = true,
     .window = 16,
     .takes_window = true,
     .sizes = kBulkSizes,
     .bytes_per_rep = 2 * kGi,
     .run = &Bench::bulk_bw,
     .raw = &RawUcx::run_stream,
     .mpi = MpiPattern::kStream},
    {.name = "mixed",
     .mode = Mode::kLoadedLatency,
     .measures = "3+ ranks: small-call latency while 2 MiB streams run, against without them",
     .sides = "0 calls 1 as rpc_lat does; ranks 2 and up stream 2 MiB messages to 1",
     .baseline = Baseline::kIdle,
     .min_sides = 3,
     .until_done = true,
     .run = &Bench::mixed,
     .note = &mixed_note},
    {.name = "fanin",
     .mode = Mode::kMemory,
     .measures = "3+ ranks: receive memory under a flood, against the receive budget",
     .sides = "1 and up flood 0, which holds what arrives for 200 ms",
     .baseline = Baseline::kBudget,
     .window = kWindow,  // raw UCX's senders' (Sluice's are held by their credits)
     .takes_window = true,
     .sizes = kFaninSizes,
     .driver_holds = true,
     .run = &Bench::fanin,
     .raw = &RawUcx::run_fanin,
     .note = &fanin_note},
    {.name = "crowd",
     .mode = Mode::kRate,
     .measures = "on its own: K busy clients' calls per second among --peers idle ones, against alone",
     .sides = "0: K busy engines call as rpc_rate does, N idle ones sit connected; 1 replies",
     .baseline = Baseline::kSolo,
     .alone = true,
     .min_sides = 1,
     .window = 32,
     .takes_window = true,
     .note = &crowd_note},
};

}  // namespace

std::span<const Test> tests() { return kTests; }

const Test* find_test(std::string_view name) {
  for (const Test& t : kTests)
    if (name == t.name) return &t;
  return nullptr;
}

namespace {

// The tests of `mode`, as test_names() says them.
std::string test_names(Mode mode) {
  std::string names;
  for (const Test& t : kTests)
    if (t.mode == mode) names += (names.empty() ? "" : ", ") + std::string(t.name);
  return names;
}

}  // namespace

void print_ratios(FILE* out, const char* prefix) {
  static constexpr struct {
    Mode mode;
    const char* name;
    const char* ratio;
  } kModes[] = {
      {Mode::kLatency, "latency", "median latency; below 1 is better"},
      {Mode::kRate, "rate", "messages or calls per second; above 1 is better"},
      {Mode::kBandwidth, "bandwidth", "MB/s (message rate up to 4 KiB); above 1 is better"},
      {Mode::kLoadedLatency, "loaded", "p99 latency with the other traffic / without it (below 5 is the goal)"},
      {Mode::kMemory, "memory", "receive high-water mark / receive budget (at most 1 is the promise)"},
  };
  for (const auto& m : kModes) {
    std::string names = test_names(m.mode);
    if (!names.empty()) std::fprintf(out, "%s  %-11s%s: %s\n", prefix, m.name, names.c_str(), m.ratio);
  }
}

void print_baselines(FILE* out, const char* prefix) {
  static constexpr struct {
    Baseline baseline;
    const char* name;
    const char* what;
  } kOwn[] = {
      {Baseline::kEngineAlone, "engine", "the engine thread sending the same messages alone"},
      {Baseline::kIdle, "idle", "the same calls without the other traffic"},
      {Baseline::kBudget, "budget", "the receive budget (with --baseline ucx, raw UCX's run is described beside)"},
      {Baseline::kSolo, "solo", "the same busy clients alone, before the idle ones connect and after they have gone"},
  };
  for (const auto& b : kOwn)
    for (const Test& t : kTests)
      if (t.baseline == b.baseline) std::fprintf(out, "%s  %-11s%s: %s\n", prefix, b.name, t.name, b.what);
}

std::string test_names() {
  std::string names;
  for (const Test& t : kTests) names += (names.empty() ? "" : ", ") + std::string(t.name);
  return names;
}

}  // namespace sluice::perf
