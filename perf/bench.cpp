#include "bench.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "submit.h"
#include "tests.h"

namespace sluice::perf {
namespace {

// rpc_rate times one call in this many (Bench::rpc).
constexpr int kRateSample = 16;

}  // namespace

Bench::Bench(Context& ctx, Engines& engines, const Link& link, const Options& o)
    : ctx_(ctx),
      main_(*engines.main),
      bounce_(engines.bounce.get()),
      raw_(engines.raw.get()),
      mpi_(engines.mpi.get()),
      link_(link),
      o_(o),
      me_(link.role()),
      n_(link.size()) {}

absl::Status Bench::setup() {
  std::size_t largest = largest_payload(o_);
  landing_ = PageBuffer(largest);
  block_ = PageBuffer(largest);
  for (Engine* e : {&main_, bounce_}) {
    if (e == nullptr) continue;
    SLUICE_RETURN_IF_ERROR(install(*e));
    SLUICE_RETURN_IF_ERROR(install_storage(*e));
  }
  SLUICE_RETURN_IF_ERROR(main_.register_handler(kCmd, [this](Message& m) {
    std::memcpy(&pending_cmd_, m.header().data(), sizeof(Cmd));
    have_cmd_ = true;
    // Here, before the test's first message (or its end, kDone) is counted: they may arrive
    // in the same progress call as the command.
    reset();
    done_count_ = 0;
  }));
  SLUICE_RETURN_IF_ERROR(main_.register_handler(kDone, [this](Message&) { ++done_count_; }));
  SLUICE_RETURN_IF_ERROR(main_.register_handler(kReady, [this](Message&) { ++ready_count_; }));
  return absl::OkStatus();
}

// Handlers every side installs on an engine: echoes, counters, sinks.
absl::Status Bench::install(Engine& e) {
  auto sinkfn = [this](const Message&, std::size_t n) { return sink(n); };
  SLUICE_RETURN_IF_ERROR(e.register_handler(kLat,
                                            [this, &e](Message& m) {
                                              if (me_ != 0) send_spin(e, m.source(), kLat, m.payload());
                                              else ++replies_;
                                            },
                                            {.unordered = false, .sink = sinkfn}));
  auto count = [this](Message&) { ++received_; };
  SLUICE_RETURN_IF_ERROR(e.register_handler(kBw, count, {.unordered = false, .sink = sinkfn}));
  SLUICE_RETURN_IF_ERROR(e.register_handler(kBulk, count, {.unordered = false, .sink = sinkfn}));
  SLUICE_RETURN_IF_ERROR(e.register_handler(kStream, count, {.unordered = true, .sink = sinkfn}));
  SLUICE_RETURN_IF_ERROR(e.register_handler(kFlood, [this](Message& m) {
    ++received_;
    if (holding_) held_.push_back(std::move(m));
  }));
  SLUICE_RETURN_IF_ERROR(e.register_handler(kAck, [this](Message&) { ++acks_; }));
  return e.register_handler(kEcho, [this](Message& m) {
    // --rpc zero: the request's own payload goes back, no copy; copy: reply_copy.
    Result r = zero_copy_ ? m.reply_with_payload({}) : m.reply_copy({}, m.payload());
    if (r != Result::kOk) reply_failed(r);
  });
}

// A storage server's read and write.
absl::Status Bench::install_storage(Engine& e) {
  // Read: the request names a length, the reply carries that much of a block (zero copy from
  // the block, or copied with --rpc copy).
  SLUICE_RETURN_IF_ERROR(e.register_handler(kRead, [this](Message& m) {
    std::uint64_t n = 0;
    if (m.header().size() == sizeof(n)) std::memcpy(&n, m.header().data(), sizeof(n));
    auto bytes = block_.first(std::min<std::size_t>(n, block_.size()));
    Result r = zero_copy_ ? m.reply({}, bytes, [](const absl::Status&) {}) : m.reply_copy({}, bytes);
    if (r != Result::kOk) reply_failed(r);
  }));
  // Write: the payload lands in the sink (the server's block buffer), an 8-byte
  // acknowledgement goes back.
  auto sinkfn = [this](const Message&, std::size_t n) { return sink(n); };
  return e.register_handler(kWrite,
                            [this](Message& m) {
                              std::uint64_t ack = m.payload().size();
                              Result r = m.reply_copy({}, std::as_bytes(std::span(&ack, 1)));
                              if (r != Result::kOk) reply_failed(r);
                            },
                            {.sink = sinkfn});
}

void Bench::send_spin(Engine& e, int to, HandlerId h, std::span<const std::byte> payload,
                      std::span<const std::byte> header, SendCallback cb) {
  Result r;
  // kWouldBlock leaves cb with us for the retry.
  // NOLINTNEXTLINE(bugprone-use-after-move): send() moves cb only when it returns kOk
  while ((r = link_.peer(e, to)->send(h, header, payload, std::move(cb))) == Result::kWouldBlock) progress_all();
  if (r != Result::kOk) fail("send: " + std::string(sluice::to_string(r)));
}

void Bench::reply_failed(Result r) const {
  std::fprintf(stderr, "sluice-perf: %s: reply: %s\n", side().c_str(), sluice::to_string(r));
}

// The driver's measuring loops progress only the engine they measure; the other one (with
// --baseline bounce) is progressed now and then, so that its peer keeps hearing from it
// (SLUICE_PEER_TIMEOUT) however long a run takes: a slow link's runs can outlast it.
void Bench::keep_alive(Engine& e) {
  if (bounce_ != nullptr) (&e == bounce_ ? main_ : *bounce_).progress();
}

void Bench::fail(const std::string& what) const {
  std::fprintf(stderr, "sluice-perf: %s: %s\n", side().c_str(), what.c_str());
  std::exit(1);
}

// ---- the tests, Sluice side -------------------------------------------------------

Figures Bench::am_lat(Engine& e, const Cmd& c) {
  std::vector<double> rtts;
  if (me_ != 0) return from_rtts(rtts, 0.5, c.size);  // the handler answers; 0 says when it is over
  PageBuffer buf(c.size, static_cast<std::size_t>(o_.offset));
  auto kept = Clock::now();
  for (int i = 0; i < c.warmup + c.iters; ++i) {
    auto t0 = Clock::now();
    int want = replies_ + 1;
    send_spin(e, 1, kLat, buf.span());
    while (replies_ < want) e.progress();
    auto t1 = Clock::now();
    if (i >= c.warmup) rtts.push_back(std::chrono::duration<double>(t1 - t0).count());
    if (t1 - kept > std::chrono::milliseconds(100)) keep_alive(e), kept = t1;  // outside the timed round
  }
  return from_rtts(rtts, 0.5, c.size);
}

Figures Bench::am_bw(Engine& e, const Cmd& c) { return stream(e, c, kBw); }

Figures Bench::am_submit(Engine& e, const Cmd& c) {
  if (me_ != 0) return stream(e, c, kBw);  // the receiver counts and acknowledges as for am_bw
  return submit_rate(e, *link_.peer(e, 1), kBw, c, o_, [this] { return acks_ == 1; });
}

Figures Bench::stream(Engine& e, const Cmd& c, HandlerId h) {
  PageBuffer buf(c.size, static_cast<std::size_t>(o_.offset));
  Figures f;
  int total = c.warmup + c.iters;
  if (me_ == 0) {
    auto t0 = Clock::now();
    int sent = 0;
    auto cb = [this](const absl::Status& s) {
      if (!s.ok()) fail(s.ToString());
      ++completions_;
    };
    for (int i = 0; i < total; ++i) {
      if (i == c.warmup) {
        while (completions_ < sent) progress_all();
        t0 = Clock::now();
      }
      while (sent - completions_ >= c.window) progress_all();
      send_spin(e, 1, h, buf.span(), {}, cb);
      ++sent;
    }
    wait_for([&] { return acks_ == 1; }, "the receiver's ack");
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    f.rate = c.iters / s;
    f.bw_mbps = static_cast<double>(c.size) * c.iters / s / 1e6;
  } else if (me_ == 1) {
    wait_for([&] { return received_ >= total; }, "the stream");
    send_spin(e, 0, kAck, {});
  }
  return f;
}

// What the reply callbacks of one rpc() run update, behind one pointer: a callback capturing
// it, the call's index and its reply buffer's fits std::function's inline storage, so the
// harness allocates nothing per call (the raw baseline does not either).
struct Bench::Calls {
  const Bench* bench;
  int warmup, sample;
  std::vector<Clock::time_point> started;  // of the timed calls
  std::vector<double> rtts;
  std::vector<PageBuffer> replies;  // reply buffers, one per call in flight (or none)
  std::vector<int> free_replies;
  int finished = 0;

  bool timed(int i) const { return i >= warmup && (i - warmup) % sample == 0; }
  // Call i's completion; `slot` is its reply buffer (-1: none).
  auto on_reply(int i, int slot) {
    return [calls = this, i, slot](const absl::Status& s, Message&) {
      if (!s.ok()) calls->bench->fail("call: " + s.ToString());
      if (calls->timed(i))
        calls->rtts.push_back(
            std::chrono::duration<double>(Clock::now() - calls->started[static_cast<std::size_t>(i)]).count());
      if (slot >= 0) calls->free_replies.push_back(slot);
      ++calls->finished;
    };
  }
};

// Issues call i of `calls`, progressing while the peer has no room.
void Bench::issue(Engine& e, HandlerId h, std::span<const std::byte> header, std::span<const std::byte> request,
                  Calls& calls, int i) {
  if (calls.timed(i)) calls.started[static_cast<std::size_t>(i)] = Clock::now();
  CallOptions options;
  int slot = -1;
  if (!calls.replies.empty()) {
    slot = calls.free_replies.back();
    calls.free_replies.pop_back();
    options.reply_buffer = calls.replies[static_cast<std::size_t>(slot)].span();
  }
  Result r;
  while ((r = link_.peer(e, 1)->call(h, header, request, options, calls.on_reply(i, slot))) == Result::kWouldBlock)
    progress_all();
  if (r != Result::kOk) fail("call: " + std::string(sluice::to_string(r)));
}

// Calls with `window` in flight: kEcho (the payload there and back), kRead (a length there,
// the payload back) or kWrite (the payload there, 8 bytes back).
Figures Bench::rpc(Engine& e, const Cmd& c, int window, HandlerId h) {
  PageBuffer buf(c.size, static_cast<std::size_t>(o_.offset));
  Figures f;
  if (me_ != 0) return f;
  std::uint64_t wanted = c.size;
  std::span<const std::byte> request_header, request = buf.span();
  if (h == kRead) request_header = std::as_bytes(std::span(&wanted, 1)), request = {};
  int total = c.warmup + c.iters;
  // With one call in flight every call is timed, as the raw ping-pong times each round trip.
  // With more, only every kRateSample-th is: the raw windowed baseline reads no clock per
  // call, and two clock reads per call took a quarter of the caller's time here (perf).
  Calls calls{.bench = this,
              .warmup = c.warmup,
              .sample = window > 1 ? kRateSample : 1,
              .started = std::vector<Clock::time_point>(static_cast<std::size_t>(total)),
              .rtts = {},
              .replies = {},
              .free_replies = {}};
  // --rpc zero: a payload above the eager limit comes back into a reply buffer, one per call
  // in flight (a free list of them), as a storage client reads blocks. Smaller ones travel in
  // the reply message itself, where a reply buffer would only add the receive posted for it.
  // (Not on the bounce-mode engine, whose large requests cannot announce a reply buffer.)
  bool zero = zero_copy_ && c.size > ctx_.config().eager_limit() && &e != bounce_ && h != kWrite;
  for (int k = 0; zero && k < window; ++k) calls.replies.emplace_back(c.size);
  for (int k = window - 1; k >= 0 && zero; --k) calls.free_replies.push_back(k);
  int issued = 0;
  unsigned polls = 0;
  auto t_start = Clock::now();
  while (calls.finished < total) {
    while (issued < total && issued - calls.finished < window) {
      if (issued == c.warmup && window > 1 && calls.finished < issued) break;
      if (issued == c.warmup) t_start = Clock::now();
      issue(e, h, request_header, request, calls, issued++);
    }
    e.progress();
    if (bounce_ != nullptr && ++polls % 1024 == 0) keep_alive(e);
  }
  double s = std::chrono::duration<double>(Clock::now() - t_start).count();
  f = from_rtts(calls.rtts, 1.0, c.size);
  f.rate = c.iters / s;
  f.bw_mbps = static_cast<double>(c.size) * f.rate / 1e6;
  return f;
}

// Ranks >= 2 stream 2 MiB messages to rank 1 (run_mixed_streamer) while rank 0 times small
// RPCs to rank 1; rank 1 answers and absorbs the streams.
Figures Bench::mixed(Engine& e, const Cmd& c) {
  if (n_ < 3) return {};
  if (me_ >= 2) run_mixed_streamer(e);
  if (me_ != 0) return {};
  return rpc(e, c, 1, kEcho);
}

void Bench::run_mixed_streamer(Engine& e) {
  static std::vector<std::byte> big(kMixedStreamSize);
  int inflight = 0;
  while (done_count_ == 0) {
    while (inflight < 4) {
      Result r = link_.peer(e, 1)->send(kStream, {}, big, [&](const absl::Status&) { --inflight; });
      if (r != Result::kOk) break;
      ++inflight;
    }
    progress_all();
  }
  wait_for([&] { return inflight == 0; }, "stream completions");
}

// Ranks >= 1 flood rank 0, whose application is busy for the first kFaninHold: its engine is
// progressed, but the handler keeps every message instead of finishing it. Credits are what
// stop the senders then; the raw baseline has none (RawUcx::fanin).
Figures Bench::fanin(Engine& e, const Cmd& c) {
  Figures f;
  PageBuffer buf(c.size, static_cast<std::size_t>(o_.offset));
  int total = c.warmup + c.iters;
  if (me_ != 0) {
    for (int i = 0; i < total; ++i) send_spin(e, 0, kFlood, buf.span());
    wait_for([&] { return acks_ >= 1; }, "rank 0's ack");
    return f;
  }
  // holding_ was set by drive(), before the senders were told to start.
  for (auto until = Clock::now() + kFaninHold; Clock::now() < until;) progress_all();
  holding_ = false;
  f.waiting = static_cast<double>(held_.size());
  f.waiting_bytes = static_cast<double>(held_.size() * c.size);
  held_.clear();  // finishes them: the slots and credits go back
  wait_for([&] { return received_ >= total * (n_ - 1); }, "the fan-in");
  auto ps = e.pool_stats(sluice::Direction::kRecv);
  f.recv_hwm = static_cast<double>(ps.high_water_bytes);
  f.recv_budget = static_cast<double>(ps.budget_bytes);
  for (int r = 1; r < n_; ++r) send_spin(e, r, kAck, {});
  return f;
}

// ---- driving and serving ------------------------------------------------------------------

const Test& Bench::test_of(const Cmd& c) const {
  std::string name(c.test, strnlen(c.test, sizeof(c.test)));
  const Test* t = find_test(name);
  if (t == nullptr) fail("a command names no test: '" + name + "'");
  return *t;
}

// This side's part of `c`: its test's function, on the engine `c` names, or raw UCX's loop.
Figures Bench::run_one(const Cmd& c) {
  const Test& t = test_of(c);
  if (c.mode == RunOn::kRaw) return t.raw == nullptr ? Figures{} : run_raw(t, c);
  return (this->*t.run)(c.mode == RunOn::kBounce ? *bounce_ : main_, c);
}

// Never inlined: scripts/instructions cuts rank 1's profile where it returns.
[[gnu::noinline]] Figures Bench::run_raw(const Test& t, const Cmd& c) {
  Figures f = (raw_->*t.raw)(c, link_);
  raw_->settle(link_);
  return f;
}

// The driver waits for the job reading its output, progressing its engine every 10 ms (its
// peers go on hearing from it); the other sides sleep in theirs, as long as a job may take.
absl::StatusOr<Figures> Bench::run_mpi(const Test& t, const Cmd& c) {
  return mpi_->run(t, c, c.mode == RunOn::kMpiOb1 ? Pml::kOb1 : Pml::kUcx, [this] { main_.progress(); });
}

void Bench::sleep_until_done() {
  auto deadline = Clock::now() + std::chrono::seconds(o_.mpi_timeout + 60);
  if (!main_.run_until([this] { return done_count_ >= 1; }, deadline)) fail("timed out waiting for rank 0's MPI job");
}

absl::StatusOr<Figures> Bench::drive(const Cmd& c) {
  const Test& t = test_of(c);
  done_count_ = 0;
  ready_count_ = 0;
  reset();
  holding_ = c.mode == RunOn::kSluice && t.driver_holds;  // from the first message on
  for (int r = 1; r < n_; ++r) send_spin(main_, r, kCmd, {}, std::as_bytes(std::span(&c, 1)));
  // The test's traffic may use another engine (the bounce baseline) than the command: nothing
  // orders the two, so wait until every rank has taken the command (and reset its counters).
  wait_for([&] { return ready_count_ == n_ - 1; }, "the other ranks to take the command");
  absl::StatusOr<Figures> f = is_mpi(c.mode) ? run_mpi(t, c) : run_one(c);
  if (t.until_done || is_mpi(c.mode)) {
    for (int r = 1; r < n_; ++r) send_spin(main_, r, kDone, {});  // "stop answering / streaming"
  }
  wait_for([&] { return done_count_ == n_ - 1; }, "the other ranks");
  return f;
}

void Bench::serve() {
  while (true) {
    wait_for([&] { return have_cmd_; }, "a command from rank 0");
    have_cmd_ = false;
    Cmd c = pending_cmd_;
    if (c.mode == RunOn::kQuit) return;
    // Sent before the test's own traffic begins: a raw or MPI run does not progress this
    // engine, and a kReady still queued for a credit would never leave.
    bool ready_sent = false;
    send_spin(main_, 0, kReady, {}, {}, [&](const absl::Status&) { ready_sent = true; });
    wait_for([&] { return ready_sent; }, "our kReady to leave");
    if (is_mpi(c.mode)) {
      sleep_until_done();
    } else {
      run_one(c);
      if (test_of(c).until_done) wait_for([&] { return done_count_ >= 1; }, "the end of the test");
    }
    send_spin(main_, 0, kDone, {});
  }
}

void Bench::quit() {
  Cmd c{};
  std::snprintf(c.test, sizeof(c.test), "quit");
  c.mode = RunOn::kQuit;
  for (int r = 1; r < n_; ++r) send_spin(main_, r, kCmd, {}, std::as_bytes(std::span(&c, 1)));
}

}  // namespace sluice::perf
