// An all-to-all test program, started by sluice-run, mpirun or by hand: every rank sends
// `count` ledger messages (and one rendezvous payload) to every other rank and checks what it
// receives: all of it, in order, intact. Then every rank calls every other once.
//
//   alltoall [COUNT] [--small] [--hang-rank R] [--exit-rank R CODE] [--print-env VAR]
// --small: payloads of 0 to 64 bytes only (the volume run: a million messages per pair).
// Exit 0 when every check passed.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <sluice/sluice.h>

#include "testing/payload.h"

using namespace sluice;
using testing_support::crc32c;
using testing_support::Ledger;
using testing_support::pattern;

int main(int argc, char** argv) {
  int count = 2000, hang_rank = -1, exit_rank = -1, exit_code = 0;
  const char* print_env = nullptr;
  bool small = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--hang-rank" && i + 1 < argc) hang_rank = std::atoi(argv[++i]);
    else if (a == "--exit-rank" && i + 2 < argc) exit_rank = std::atoi(argv[++i]), exit_code = std::atoi(argv[++i]);
    else if (a == "--print-env" && i + 1 < argc) print_env = argv[++i];
    else if (a == "--small") small = true;
    else count = std::atoi(argv[i]);
  }
  auto ctx = Context::create();
  if (!ctx.ok()) {
    std::fprintf(stderr, "alltoall: %s\n", ctx.status().ToString().c_str());
    return 1;
  }
  int me = (*ctx)->rank(), n = (*ctx)->size();
  if (print_env) std::printf("rank %d %s=%s\n", me, print_env, std::getenv(print_env) ? std::getenv(print_env) : "(unset)");
  std::fflush(stdout);
  if (me == exit_rank) return exit_code;
  if (me == hang_rank) {
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  auto eng = (*ctx)->create_engine();
  if (!eng.ok()) {
    std::fprintf(stderr, "alltoall: rank %d: %s\n", me, eng.status().ToString().c_str());
    return 1;
  }
  Engine& e = **eng;
  std::vector<std::uint32_t> next(static_cast<std::size_t>(n));
  int bad = 0, received = 0, big = 0, replies = 0;
  auto big_payload = pattern(std::size_t{1} << 20, 99);
  (void)e.register_handler(1, [&](Message& m) {
    Ledger l;
    std::memcpy(&l, m.header().data(), sizeof(l));
    if (l.source != static_cast<std::uint32_t>(m.source()) || l.seq != next[l.source]++ ||
        crc32c(m.payload()) != l.crc || m.payload().size() != l.size) {
      ++bad;
    }
    ++received;
  });
  (void)e.register_handler(2, [&](Message& m) {
    if (crc32c(m.payload()) != crc32c(big_payload)) ++bad;
    ++big;
  });
  (void)e.register_handler(3, [&](Message& m) { (void)m.reply({}, m.payload()); });
  int dones = 0;
  (void)e.register_handler(4, [&](Message&) { ++dones; });
  int completions = 0, failures = 0;
  auto cb = [&](absl::Status s) {
    ++completions;
    if (!s.ok()) {
      ++failures;
      std::fprintf(stderr, "alltoall: rank %d: send failed: %s\n", me, s.ToString().c_str());
    }
  };
  // kWouldBlock (no credit, or the send queue is full while the peer catches up): retried
  // inside run_until, which progresses between attempts and sleeps when idle beyond
  // SLUICE_SPIN.
  auto retry = [&](int to, const char* what, const std::function<Result()>& op) {
    Result r = Result::kWouldBlock;
    e.run_until([&] { return (r = op()) != Result::kWouldBlock; });
    if (r != Result::kOk) std::fprintf(stderr, "alltoall: rank %d: %s to %d: %s\n", me, what, to, to_string(r));
    return r == Result::kOk;
  };
  int expected_sends = 0;
  for (int i = 0; i < count; ++i) {
    for (int k = 1; k < n; ++k) {
      int to = (me + k) % n;
      // Sizes around every boundary: empty, tiny, a cache line, the eager limit -1/0/+1.
      static const std::size_t kSizes[] = {0, 1, 63, 64, 8192 - sizeof(Ledger) - 1, 8192 - sizeof(Ledger),
                                           8192 - sizeof(Ledger) + 1, 200};
      static const std::size_t kSmall[] = {0, 1, 8, 17, 32, 63, 64, 40};
      auto payload = pattern(small ? kSmall[i % 8] : kSizes[i % 8], static_cast<std::uint64_t>(i));
      Ledger l{static_cast<std::uint32_t>(me), static_cast<std::uint32_t>(i), payload.size(), crc32c(payload)};
      if (!retry(to, "send", [&] { return e.peer(to)->send_copy(1, std::as_bytes(std::span(&l, 1)), payload, cb); }))
        return 1;
      ++expected_sends;
    }
  }
  for (int k = 1; k < n; ++k) {
    int to = (me + k) % n;
    if (!retry(to, "send", [&] { return e.peer(to)->send(2, {}, big_payload, cb); })) return 1;
    ++expected_sends;
    if (!retry(to, "call", [&] {
          return e.peer(to)->call(3, {}, std::as_bytes(std::span(&me, 1)), {}, [&](absl::Status s, Message& r) {
            if (!s.ok() || r.payload().size() != sizeof(int)) ++bad;
            ++replies;
          });
        }))
      return 1;
  }
  bool ok = e.run_until([&] {
    return received == count * (n - 1) && big == n - 1 && replies == n - 1 && completions == expected_sends;
  }, Clock::now() + std::chrono::seconds(120));
  // Stay up (progressing) until every rank says it needs nothing more from us.
  for (int k = 1; k < n; ++k) {
    int to = (me + k) % n;
    if (!retry(to, "send", [&] { return e.peer(to)->send(4, {}, {}); })) return 1;
  }
  ok = e.run_until([&] { return dones == n - 1; }, Clock::now() + std::chrono::seconds(120)) && ok;
  if (!ok || bad != 0 || failures != 0) {
    std::fprintf(stderr, "alltoall: rank %d: %s, received %d/%d, big %d, replies %d, bad %d, failures %d\n", me,
                 ok ? "checks failed" : "timed out", received, count * (n - 1), big, replies, bad, failures);
    return 1;
  }
  std::printf("alltoall: rank %d of %d ok (%d messages from each peer)\n", me, n, count);
  return 0;
}
