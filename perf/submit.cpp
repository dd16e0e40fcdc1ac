#include "submit.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "buffer.h"

namespace sluice::perf {
namespace {

constexpr std::chrono::seconds kLimit{300};

[[noreturn]] void fail(const char* what, Result r) {
  std::fprintf(stderr, "sluice-perf: am_submit: %s: %s\n", what, sluice::to_string(r));
  std::exit(1);
}

// What a run's attempts share, behind the one pointer each attempt captures (so that it fits
// AnyInvocable's inline storage: the harness allocates nothing per message).
struct Shared {
  Engine* engine;
  Peer* peer;
  HandlerId handler;
  std::span<const std::byte> payload;
  int sent = 0;                // attempts answered kOk (engine thread only)
  std::atomic<int> failed{0};  // a Result other than kOk/kWouldBlock, from any thread
};

// `n` messages sent by the engine thread itself.
void send_alone(Shared& s, int n) {
  for (int i = 0; i < n; ++i) {
    Result r;
    while ((r = s.peer->send_copy(s.handler, s.payload)) == Result::kWouldBlock) s.engine->progress();
    if (r != Result::kOk) fail("send_copy", r);
  }
}

// `producers` threads handing `n` messages to the engine between them through submit().
std::vector<std::thread> start_producers(Shared& s, int producers, int n) {
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    int share = n / producers + (p < n % producers ? 1 : 0);
    threads.emplace_back([&s, share] {
      auto deadline = Clock::now() + kLimit;
      for (int i = 0; i < share; ++i) {
        Result r = s.engine->submit(
            [sp = &s] {
              Result a = sp->peer->send_copy(sp->handler, sp->payload);
              if (a == Result::kOk) ++sp->sent;
              else if (a != Result::kWouldBlock) sp->failed = static_cast<int>(a);
              return a;
            },
            deadline);
        if (r != Result::kOk) {
          s.failed = static_cast<int>(r);
          s.engine->post([] {});  // wakes the driver to see it
          return;
        }
      }
    });
  }
  return threads;
}

// Drives the engine until `done` or a failure, then joins the producers.
void drive(Shared& s, std::vector<std::thread>& threads, const std::function<bool()>& done) {
  bool ok = s.engine->run_until([&] { return s.failed != 0 || done(); }, Clock::now() + kLimit);
  for (auto& t : threads) t.join();
  if (s.failed != 0) fail("submit", static_cast<Result>(s.failed.load()));
  if (!ok) fail("waiting for the messages", Result::kDeadlineExceeded);
}

}  // namespace

Figures submit_rate(Engine& e, Peer& peer, HandlerId handler, const Cmd& c, const Options& o,
                    const std::function<bool()>& received) {
  PageBuffer buf(c.size, static_cast<std::size_t>(o.offset));
  Shared s{&e, &peer, handler, buf.span()};
  Figures f;
  int producers = c.mode == RunOn::kEngineAlone ? 0 : o.producers;
  std::vector<std::thread> threads;
  if (producers == 0) send_alone(s, c.warmup);
  else threads = start_producers(s, producers, c.warmup);
  drive(s, threads, [&] { return s.sent == (producers == 0 ? 0 : c.warmup); });
  auto t0 = Clock::now();
  if (producers == 0) send_alone(s, c.iters);
  else threads = start_producers(s, producers, c.iters);
  drive(s, threads, received);
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  f.rate = c.iters / secs;
  f.bw_mbps = static_cast<double>(c.size) * c.iters / secs / 1e6;
  return f;
}

}  // namespace sluice::perf
