// sluice-perf -t crowd: one server, --peers N idle clients, K busy ones, in processes of their
// own that sluice-perf forks (no launcher; each client engine is driven by a thread of its own).
//
//   parent (no UCX)  ── socketpair lines ──  server: one engine, listen(127.0.0.1:0), an echo method
//                                         ├─ busy: max(--busy) engines, a thread each, calling it
//                                         └─ idle, ceil(N / --per-process) of them: engines that
//                                            connect (--connects: one after another, or all at
//                                            once), then are progressed every --idle-poll ms (or
//                                            each sleeps in wait())
//
// Each of -r rounds runs, per --busy K and size, K busy engines' calls (rpc_rate's, -W in
// flight) for --seconds alone (the solo run); then the idle clients connect, one process after
// another (each connect timed), or with --connects all every engine of every process at once
// (the time from the word to the last connect's end); the server's CPU time is read from /proc over --seconds with
// every client idle; then the same K busy engines call again, among the N idle ones; then the
// idle clients exit, and the K busy engines call alone once more. Each (K, size) makes one row,
// of medians over the rounds (report.h's CrowdFigures beside the usual figures), its baseline
// the mean of the two solo runs that bracket the crowded one.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

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
  // Whether the other side has closed (or the socket failed): next() has nothing more.
  bool eof() const { return eof_; }

 private:
  int fd_;
  bool eof_ = false;
  std::string buffer_;
};

// Writes `line` and a newline to `fd`; false when the other side is gone.
bool say(int fd, const std::string& line);

// One child process and the parent's end of its socket.
struct Child {
  std::string what;  // "the server", "idle clients 0-39"
  pid_t pid = -1;
  std::unique_ptr<Lines> lines;
  bool say(const std::string& line) const { return crowd::say(lines->fd(), line); }
};

// The parent's children (crowd_children.cpp): forked, talked to, waited for, killed.
class Children {
 public:
  ~Children() { kill_all(); }
  // A child running `body(fd)`, bound to `cpu` (-1: wherever the parent may run); it dies
  // with the parent (PR_SET_PDEATHSIG) and holds no other child's socket.
  absl::StatusOr<Child*> spawn(const std::string& what, int cpu, const std::function<void(int)>& body);
  // The child's next line, which must start with `word`: the rest of it. An "error ..." line,
  // silence for `within` or another word is an error naming the child.
  static absl::StatusOr<std::string> expect(Child& c, const std::string& word, Clock::duration within);
  // Waits up to 30 s for `c` to exit (0: OK) and forgets it.
  absl::Status wait(Child* c);
  void kill_all();

 private:
  std::vector<std::unique_ptr<Child>> children_;
};

// CPU seconds process `pid`'s threads have run so far, to the nanosecond (the first field of
// each /proc/PID/task/TID/schedstat; /proc/PID/stat counts 10 ms ticks); NAN when unreadable.
double cpu_seconds(pid_t pid);
// The CPUs this process may run on.
std::vector<int> allowed_cpus();
// The open-file limit raised to its hard limit (inherited by the children).
void raise_fd_limit();

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
// `engines` idle clients of `address`, connected one after another (or all at once, a thread
// each, after saying "ready" and reading "go"): say "connected OK FAILED SECONDS MAX_SECONDS",
// stay idle until "quit", then say "alive N CALLS FAILED" (their peers still alive, their calls
// and how many failed), go on until "close", close and end. Idle: the main thread progresses every engine each
// `poll_ms` and sleeps in between (--idle-poll); with 0, each engine has a thread of its own, asleep in Engine::wait().
// With `calls` (--idle-calls, polled only), each engine makes that many calls, one at a time, once connected and again
// after "quit", and every second engine one call per poll in between.
[[noreturn]] void idle(int fd, const std::string& address, int engines, bool at_once, int poll_ms, int calls);

}  // namespace crowd
}  // namespace sluice::perf
