// sluice-perf -t crowd: one server, --peers N idle clients, K busy ones, in processes of their
// own that sluice-perf forks (no launcher; each client engine is driven by a thread of its own).
//
//   parent (no UCX)  ── socketpair lines ──  server: one engine, listen(127.0.0.1:0), an echo method
//                                         ├─ busy: max(--busy) engines, a thread each, calling it
//                                         └─ idle, ceil(N / --per-process) of them: engines that
//                                            connect one after another, then sleep in wait()
//
// The parent runs, per --busy K and size: K busy engines' calls (rpc_rate's, -W in flight) for
// --seconds alone (the solo run), before any idle client connects; then the idle clients
// connect, one process after another (each connect timed); the server's CPU time is read from
// /proc over --seconds with every client idle; then the same K busy engines' calls again, among
// the N idle ones. Each (K, size) makes one row (report.h's CrowdFigures beside the usual ones).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include <sluice/sluice.h>

#include "options.h"

namespace sluice::perf {

// Runs the crowd test as `o` says and prints its rows; the exit status (1 when a process failed).
int run_crowd(const Options& o);

namespace crowd {

// Lines on a socket, one side's reading end (the parent's of each child, each child's of the parent).
class Lines {
 public:
  explicit Lines(int fd) : fd_(fd) {}
  // The next line without its newline; nullopt at end of file, on an error or after `deadline`.
  std::optional<std::string> next(Clock::time_point deadline = Clock::time_point::max());
  int fd() const { return fd_; }

 private:
  int fd_;
  std::string buffer_;
};

// Writes `line` and a newline to `fd`; false when the other side is gone.
bool say(int fd, const std::string& line);

// The server's echo method, beside bench.h's (900-918) and connect.h's (930).
constexpr HandlerId kEcho = 940;

// The children: each runs in a forked process, reads the parent's lines on `fd` and answers
// there; they end the process (_exit) when told to quit, or when the parent goes away.
// The server: says "port P", then answers "stats" with "stats HIGH_WATER BUDGET" (its receive
// pool's bytes) until "quit".
[[noreturn]] void serve(int fd);
// `engines` busy clients of `address`: say "connected OK FAILED SECONDS MAX_SECONDS", then
// answer each "run K SIZE WINDOW SECONDS" (the first K of them call for SECONDS after a short
// warmup) with "done ERRORS P50_US P99_US AVG_US RATE_1 ... RATE_K" until "quit".
[[noreturn]] void busy(int fd, const std::string& address, int engines);
// `engines` idle clients of `address`, connected one after another: say "connected OK FAILED
// SECONDS MAX_SECONDS", sleep in their engines until "quit", then say "alive N" (their peers
// still alive) and end.
[[noreturn]] void idle(int fd, const std::string& address, int engines);

}  // namespace crowd
}  // namespace sluice::perf
