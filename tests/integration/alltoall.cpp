// An all-to-all test program, started by sluice-run, mpirun or by hand: every rank sends
// `count` ledger messages (and one rendezvous payload) to every other rank and checks what it
// receives: all of it, in order, intact. Then every rank calls every other once.
//
//   alltoall [COUNT] [--small] [--mixed SECONDS] [--hang-rank R] [--exit-rank R CODE] [--print-env VAR]
// --small: payloads of 0 to 64 bytes only (the volume run: a million messages per pair).
// --mixed: the pool-exhaustion run instead (docs/reliability.md, "the brpc stall"): for SECONDS,
// every rank sends 64-byte and 2 MiB ledger messages to every other rank and more 64-byte
// ones to rank 0 (fan-in); run it with pools shrunk through SLUICE_* variables. Checks the
// ledger (nothing lost, duplicated, reordered or corrupt) and that no sender's small messages
// went quiet for more than ALLTOALL_STALL_MS (default 2000) while it was still sending;
// prints the backpressure the run met (flow.would_block, flow.credit_stalls). A 2 MiB message
// the receiver refuses (its SLUICE_RECV_POOL_MAX can never hold it: the send completes with
// RESOURCE_EXHAUSTED naming the variable) is counted as refused, not as a failure; the
// receiver checks that the large ones it got are in order and as many as were not refused.
// Exit 0 when every check passed.
#include <unistd.h>

#include <algorithm>
#include <chrono>
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

namespace {

// Sends with `op` until it is not refused for backpressure (kWouldBlock), progressing the
// engine meanwhile; false on any other refusal (printed).
bool send_until_accepted(Engine& e, int me, int to, const char* what, const std::function<Result()>& op) {
  Result r = Result::kWouldBlock;
  e.run_until([&] { return (r = op()) != Result::kWouldBlock; });
  if (r != Result::kOk) std::fprintf(stderr, "alltoall: rank %d: %s to %d: %s\n", me, what, to, to_string(r));
  return r == Result::kOk;
}

// What one source sent us and what arrived from it, for the mixed-load run.
struct Flow {
  std::uint32_t next_small = 0, next_big = 0;  // ledger sequence expected next (large: at least)
  std::uint32_t got_big = 0;                   // large messages that arrived
  bool done = false;                           // its count of what it sent has arrived
  std::uint32_t sent_small = 0, sent_big = 0;  // that count
  Clock::time_point last{};                    // its last small message's delivery
  Clock::duration longest_gap{};               // between two of those, while it sent
};

struct Counts {
  std::uint32_t small, big;
};

int mixed_load(Engine& e, int me, int n, int seconds) {
  constexpr std::size_t kSmall = 64, kBig = std::size_t{2} << 20;
  const char* stall_env = std::getenv("ALLTOALL_STALL_MS");
  const auto stall_bound = std::chrono::milliseconds(stall_env ? std::atoi(stall_env) : 2000);
  // Two large payloads, alternated; sent zero-copy, so they stay untouched until the end.
  const std::vector<std::byte> bigs[2] = {pattern(kBig, 7), pattern(kBig, 8)};
  const std::uint32_t big_crc[2] = {crc32c(bigs[0]), crc32c(bigs[1])};
  std::vector<Flow> flows(static_cast<std::size_t>(n));
  int bad = 0, failures = 0, completions = 0, finished = 0;
  auto arrived = [&](Flow& f) {
    auto now = Clock::now();
    if (f.last != Clock::time_point{} && !f.done) f.longest_gap = std::max(f.longest_gap, now - f.last);
    f.last = now;
  };
  auto check = [&](Message& m, bool big) {
    Ledger l;
    if (m.header().size() != sizeof(l) || m.source() < 0 || m.source() >= n) {
      ++bad;
      return;
    }
    std::memcpy(&l, m.header().data(), sizeof(l));
    Flow& f = flows[static_cast<std::size_t>(m.source())];
    std::uint32_t& next = big ? f.next_big : f.next_small;
    // Large messages the receiver refused leave gaps in their sequence, never reorderings.
    bool in_order = big ? l.seq >= next : l.seq == next;
    next = l.seq + 1;
    if (big) ++f.got_big;
    if (l.source != static_cast<std::uint32_t>(m.source()) || !in_order || m.payload().size() != l.size ||
        crc32c(m.payload()) != l.crc) {
      ++bad;
    }
    if (!big) arrived(f);  // the stall meter watches the small messages: never starved
  };
  (void)e.register_handler(1, [&](Message& m) { check(m, false); });
  (void)e.register_handler(5, [&](Message& m) { check(m, true); });
  (void)e.register_handler(6, [&](Message& m) {
    Counts c{0, 0};
    if (m.header().size() != sizeof(c) || m.source() < 0 || m.source() >= n) {
      ++bad;
      return;
    }
    std::memcpy(&c, m.header().data(), sizeof(c));
    Flow& f = flows[static_cast<std::size_t>(m.source())];
    f.done = true;
    f.sent_small = c.small;
    f.sent_big = c.big;
  });
  (void)e.register_handler(4, [&](Message&) { ++finished; });
  auto cb = [&](absl::Status s) {
    ++completions;
    if (!s.ok() && failures++ == 0)
      std::fprintf(stderr, "alltoall: rank %d: send failed: %s\n", me, s.ToString().c_str());
  };
  std::vector<Counts> sent(static_cast<std::size_t>(n), Counts{0, 0});
  std::vector<std::uint32_t> refused(static_cast<std::size_t>(n), 0);  // large ones, per receiver
  int refused_total = 0;
  int sends = 0;
  auto send_small = [&](int to) {
    Counts& c = sent[static_cast<std::size_t>(to)];
    auto payload = pattern(kSmall, c.small);
    Ledger l{static_cast<std::uint32_t>(me), c.small, payload.size(), crc32c(payload)};
    if (!send_until_accepted(e, me, to, "send",
                             [&] { return e.peer(to)->send_copy(1, std::as_bytes(std::span(&l, 1)), payload, cb); }))
      return false;
    ++c.small;
    ++sends;
    return true;
  };
  auto send_big = [&](int to) {
    Counts& c = sent[static_cast<std::size_t>(to)];
    int which = static_cast<int>(c.big % 2);
    Ledger l{static_cast<std::uint32_t>(me), c.big, kBig, big_crc[which]};
    auto big_done = [&, to](absl::Status s) {
      if (s.code() == absl::StatusCode::kResourceExhausted &&
          s.message().find("SLUICE_RECV_POOL_MAX") != std::string_view::npos) {
        ++completions;
        ++refused[static_cast<std::size_t>(to)];
        if (refused_total++ == 0) std::printf("mixed: rank %d: refused: %s\n", me, s.ToString().c_str());
        return;
      }
      cb(s);
    };
    if (!send_until_accepted(e, me, to, "send", [&] {
          return e.peer(to)->send(5, std::as_bytes(std::span(&l, 1)), bigs[which], big_done);
        }))
      return false;
    ++c.big;
    ++sends;
    return true;
  };
  auto end = Clock::now() + std::chrono::seconds(seconds);
  for (std::uint64_t round = 0; Clock::now() < end; ++round) {
    for (int k = 1; k < n; ++k) {
      int to = (me + k) % n;
      if (!send_small(to)) return 1;
      if (round % 16 == 0 && !send_big(to)) return 1;
    }
    if (me != 0 && (!send_small(0) || !send_small(0))) return 1;  // the fan-in
  }
  // What was sent is counted once every send completed: refused ones do not count.
  bool ok = e.run_until([&] { return completions == sends; }, Clock::now() + std::chrono::seconds(120));
  for (int k = 1; k < n; ++k) {
    int to = (me + k) % n;
    Counts c = sent[static_cast<std::size_t>(to)];
    c.big -= refused[static_cast<std::size_t>(to)];
    if (!send_until_accepted(e, me, to, "send",
                             [&] { return e.peer(to)->send(6, std::as_bytes(std::span(&c, 1)), {}); }))
      return 1;
  }
  auto all_in = [&] {
    for (int s = 0; s < n; ++s) {
      const Flow& f = flows[static_cast<std::size_t>(s)];
      if (s != me && (!f.done || f.next_small != f.sent_small || f.got_big != f.sent_big)) return false;
    }
    return true;
  };
  ok = ok && e.run_until(all_in, Clock::now() + std::chrono::seconds(120));
  for (int k = 1; k < n; ++k) {
    int to = (me + k) % n;
    if (!send_until_accepted(e, me, to, "send", [&] { return e.peer(to)->send(4, {}, {}); })) return 1;
  }
  ok = e.run_until([&] { return finished == n - 1; }, Clock::now() + std::chrono::seconds(120)) && ok;
  Clock::duration longest{};
  std::uint64_t small_in = 0, big_in = 0;
  for (const Flow& f : flows) {
    longest = std::max(longest, f.longest_gap);
    small_in += f.next_small;
    big_in += f.got_big;
  }
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(longest).count();
  const Stats& st = e.stats();
  std::printf(
      "mixed: rank %d: received %llu small and %llu large, %d large refused, longest small-message gap %lld ms, "
      "flow.would_block %llu flow.credit_stalls %llu\n",
      me, static_cast<unsigned long long>(small_in), static_cast<unsigned long long>(big_in), refused_total,
      static_cast<long long>(ms), static_cast<unsigned long long>(st.value("flow.would_block")),
      static_cast<unsigned long long>(st.value("flow.credit_stalls")));
  if (!ok || bad != 0 || failures != 0 || longest > stall_bound) {
    std::fprintf(
        stderr,
        "alltoall: rank %d: mixed load %s: bad %d, failures %d, longest small-message gap %lld ms (bound %lld)\n", me,
        ok ? "checks failed" : "timed out", bad, failures, static_cast<long long>(ms),
        static_cast<long long>(stall_bound.count()));
    return 1;
  }
  std::printf("alltoall: rank %d of %d ok (mixed load, %d s)\n", me, n, seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int count = 2000, hang_rank = -1, exit_rank = -1, exit_code = 0;
  const char* print_env = nullptr;
  bool small = false;
  int mixed_seconds = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--hang-rank" && i + 1 < argc) hang_rank = std::atoi(argv[++i]);
    else if (a == "--exit-rank" && i + 2 < argc) exit_rank = std::atoi(argv[++i]), exit_code = std::atoi(argv[++i]);
    else if (a == "--print-env" && i + 1 < argc) print_env = argv[++i];
    else if (a == "--small") small = true;
    else if (a == "--mixed" && i + 1 < argc) mixed_seconds = std::atoi(argv[++i]);
    else count = std::atoi(argv[i]);
  }
  auto ctx = Context::create();
  if (!ctx.ok()) {
    std::fprintf(stderr, "alltoall: %s\n", ctx.status().ToString().c_str());
    return 1;
  }
  int me = (*ctx)->rank(), n = (*ctx)->size();
  if (print_env)
    std::printf("rank %d %s=%s\n", me, print_env, std::getenv(print_env) ? std::getenv(print_env) : "(unset)");
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
  if (mixed_seconds > 0) return mixed_load(e, me, n, mixed_seconds);
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
  (void)e.register_handler(3, [&](Message& m) { (void)m.reply_copy({}, m.payload()); });
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
    return send_until_accepted(e, me, to, what, op);
  };
  int expected_sends = 0;
  for (int i = 0; i < count; ++i) {
    for (int k = 1; k < n; ++k) {
      int to = (me + k) % n;
      // Sizes around every boundary: empty, tiny, a cache line, the eager limit -1/0/+1.
      static const std::size_t kSizes[] = {
          0, 1, 63, 64, 8192 - sizeof(Ledger) - 1, 8192 - sizeof(Ledger), 8192 - sizeof(Ledger) + 1, 200};
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
  bool ok = e.run_until(
      [&] { return received == count * (n - 1) && big == n - 1 && replies == n - 1 && completions == expected_sends; },
      Clock::now() + std::chrono::seconds(120));
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
