// sluice-perf: Sluice's benchmark tool, in the spirit of ucx_perftest.
//
//   sluice-run -n 2 --bind core build/perf/sluice-perf -t am_lat,bulk_bw --baseline ucx
//
// Rank 0 drives and reports; the other ranks answer. With -m cs, a client and a server do
// instead, over Engine::connect()/listen() (connect.h). Every figure is the median of -r
// repetitions; with --baseline, the same pattern runs on raw UCX tag matching (ucx) or with
// Sluice's bounce-buffer mode (bounce), interleaved A B A B, and the ratio Sluice/baseline
// of the test's headline figure is printed per row. Exit status 2 on bad arguments.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <sluice/sluice.h>

#include "buffer.h"
#include "connect.h"
#include "options.h"
#include "raw_ucx.h"
#include "report.h"
#include "rows.h"
#include "submit.h"
namespace {

using sluice::Clock;
using sluice::Engine;
using sluice::Message;
using sluice::Result;
using namespace sluice::perf;

constexpr sluice::HandlerId kCmd = 900, kDone = 901, kReady = 902, kLat = 910, kBw = 911, kAck = 912, kEcho = 913,
                            kBulk = 914, kStream = 915, kFlood = 916, kRead = 917, kWrite = 918;
// How long fanin's receiver leaves what arrives unfinished before it catches up.
constexpr std::chrono::milliseconds kFaninHold{200};
// rpc_rate times one call in this many (Bench::rpc).
constexpr int kRateSample = 16;

class Bench {
 public:
  Bench(sluice::Context& ctx, Engines& engines, const Link& link, const Options& o)
      : ctx_(ctx),
        main_(*engines.main),
        bounce_(engines.bounce.get()),
        raw_(engines.raw.get()),
        link_(link),
        o_(o),
        me_(link.role()),
        n_(link.size()) {}

  absl::Status setup() {
    std::size_t largest = largest_payload(o_);
    landing_ = PageBuffer(largest);
    block_ = PageBuffer(largest);
    for (Engine* e : {&main_, bounce_}) {
      if (e == nullptr) continue;
      SLUICE_RETURN_IF_ERROR(install(*e));
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

  // Handlers every rank installs on an engine: echoes, counters, sinks.
  absl::Status install(Engine& e) {
    SLUICE_RETURN_IF_ERROR(
        e.register_handler(kLat,
                           [this, &e](Message& m) {
                             if (me_ != 0) send_spin(e, m.source(), kLat, m.payload());
                             else ++replies_;
                           },
                           {.unordered = false, .sink = [this](const Message&, std::size_t n) { return sink(n); }}));
    auto count = [this](Message&) { ++received_; };
    auto sinkfn = [this](const Message&, std::size_t n) { return sink(n); };
    SLUICE_RETURN_IF_ERROR(e.register_handler(kBw, count, {.unordered = false, .sink = sinkfn}));
    SLUICE_RETURN_IF_ERROR(e.register_handler(kBulk, count, {.unordered = false, .sink = sinkfn}));
    SLUICE_RETURN_IF_ERROR(e.register_handler(kStream, count, {.unordered = true, .sink = sinkfn}));
    SLUICE_RETURN_IF_ERROR(e.register_handler(kFlood, [this](Message& m) {
      ++received_;
      if (holding_) held_.push_back(std::move(m));
    }));
    SLUICE_RETURN_IF_ERROR(e.register_handler(kAck, [this](Message&) { ++acks_; }));
    SLUICE_RETURN_IF_ERROR(e.register_handler(kEcho, [this](Message& m) {
      // --rpc zero: the request's own payload goes back, no copy; copy: reply_copy.
      Result r = zero_copy_ ? m.reply_with_payload({}) : m.reply_copy({}, m.payload());
      if (r != Result::kOk) reply_failed(r);
    }));
    // A storage server's read: the request names a length, the reply carries that much of a
    // block (zero copy from the block, or copied with --rpc copy).
    SLUICE_RETURN_IF_ERROR(e.register_handler(kRead, [this](Message& m) {
      std::uint64_t n = 0;
      if (m.header().size() == sizeof(n)) std::memcpy(&n, m.header().data(), sizeof(n));
      auto bytes = block_.first(std::min<std::size_t>(n, block_.size()));
      Result r = zero_copy_ ? m.reply({}, bytes, [](absl::Status) {}) : m.reply_copy({}, bytes);
      if (r != Result::kOk) reply_failed(r);
    }));
    // And its write: the payload lands in the sink (the server's block buffer), an 8-byte
    // acknowledgement goes back.
    SLUICE_RETURN_IF_ERROR(e.register_handler(kWrite,
                                              [this](Message& m) {
                                                std::uint64_t ack = m.payload().size();
                                                Result r = m.reply_copy({}, std::as_bytes(std::span(&ack, 1)));
                                                if (r != Result::kOk) reply_failed(r);
                                              },
                                              {.sink = sinkfn}));
    return absl::OkStatus();
  }

  // Where rendezvous payloads land: one buffer, sized once for the largest message of the run
  // (never reallocated while a transfer may be writing into it).
  std::span<std::byte> sink(std::size_t n) {
    if (landing_.size() < n) return {};  // larger than planned: a receive-pool slot
    return std::span(landing_.data(), n);
  }

  void progress_all() {
    main_.progress();
    if (bounce_) bounce_->progress();
  }

  void send_spin(Engine& e, int to, sluice::HandlerId h, std::span<const std::byte> payload,
                 std::span<const std::byte> header = {}, sluice::SendCallback cb = {}) {
    Result r;
    // kWouldBlock leaves cb with us for the retry.
    while ((r = link_.peer(e, to)->send(h, header, payload, std::move(cb))) == Result::kWouldBlock) progress_all();
    if (r != Result::kOk) fail("send: " + std::string(sluice::to_string(r)));
  }

  // Who this process is, in messages: "rank N", or cs mode's client or server.
  std::string side() const { return link_.cs() ? (me_ == 0 ? "client" : "server") : "rank " + std::to_string(me_); }
  void reply_failed(Result r) const {
    std::fprintf(stderr, "sluice-perf: %s: reply: %s\n", side().c_str(), sluice::to_string(r));
  }

  // The driver's measuring loops progress only the engine they measure; the other one (with
  // --baseline bounce) is progressed now and then, so that its peer keeps hearing from it
  // (SLUICE_PEER_TIMEOUT) however long a run takes: a slow link's runs can outlast it.
  void keep_alive(Engine& e) {
    if (bounce_ != nullptr) (&e == bounce_ ? main_ : *bounce_).progress();
  }

  [[noreturn]] void fail(const std::string& what) {
    std::fprintf(stderr, "sluice-perf: %s: %s\n", side().c_str(), what.c_str());
    std::exit(1);
  }

  // Progresses until `done`; the clock is read rarely (it is not free on every machine, and
  // the raw baseline's loops do not read it either). A template, not a std::function: the
  // echoing rank of am_lat waits here, and its polling loop is part of what is measured. A cs
  // side whose other side is gone stops at once.
  template <typename Done>
  void wait_for(const Done& done, const char* what) {
    auto deadline = Clock::now() + std::chrono::seconds(300);
    for (unsigned n = 1; !done(); ++n) {
      progress_all();
      if (n % 4096 != 0) continue;
      if (Clock::now() > deadline) fail(std::string("timed out waiting for ") + what);
      if (!link_.alive()) fail(std::string("the other side is gone: it left while waiting for ") + what);
    }
  }

  void reset() {
    received_ = replies_ = acks_ = 0;
    completions_ = 0;
  }

  // ---- the tests, sluice side -------------------------------------------------------------

  Figures am_lat(Engine& e, const Cmd& c) {
    PageBuffer buf(c.size, static_cast<std::size_t>(o_.offset));
    std::vector<double> rtts;
    if (me_ == 0) {
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
    } else {
      // the handler answers; rank 0 tells us when it is over
    }
    return from_rtts(rtts, 0.5, c.size);
  }

  Figures stream(Engine& e, const Cmd& c, sluice::HandlerId h) {
    PageBuffer buf(c.size, static_cast<std::size_t>(o_.offset));
    Figures f;
    int total = c.warmup + c.iters;
    if (me_ == 0) {
      auto t0 = Clock::now();
      int sent = 0;
      auto cb = [this](absl::Status s) {
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

  // Calls with `window` in flight: kEcho (the payload there and back), kRead (a length there,
  // the payload back) or kWrite (the payload there, 8 bytes back).
  Figures rpc(Engine& e, const Cmd& c, int window, sluice::HandlerId h = kEcho) {
    PageBuffer buf(c.size, static_cast<std::size_t>(o_.offset));
    Figures f;
    if (me_ != 0) return f;
    std::uint64_t wanted = c.size;
    std::span<const std::byte> request_header, request = buf.span();
    if (h == kRead) request_header = std::as_bytes(std::span(&wanted, 1)), request = {};
    int total = c.warmup + c.iters;
    // --rpc zero: a payload above the eager limit comes back into a reply buffer, one per call
    // in flight (a free list of them), as a storage client reads blocks. Smaller ones travel in
    // the reply message itself, where a reply buffer would only add the receive posted for it.
    // (Not on the bounce-mode engine, whose large requests cannot announce a reply buffer.)
    bool zero = zero_copy_ && c.size > ctx_.config().eager_limit() && &e != bounce_ && h != kWrite;
    std::vector<PageBuffer> replies;
    for (int k = 0; zero && k < window; ++k) replies.emplace_back(c.size);
    std::vector<int> free_replies;
    for (int k = window - 1; k >= 0 && zero; --k) free_replies.push_back(k);
    // What the reply callbacks update, behind one pointer: a callback capturing it, the call's
    // index and its reply buffer's fits std::function's inline storage, so the harness
    // allocates nothing per call (the raw baseline does not either).
    // With one call in flight every call is timed, as the raw ping-pong times each round trip.
    // With more, only every kRateSample-th is: the raw windowed baseline reads no clock per
    // call, and two clock reads per call took a quarter of the caller's time here (perf).
    const int sample = window > 1 ? kRateSample : 1;
    struct Run {
      Bench* bench;
      int finished = 0;
      std::vector<double> rtts;
      std::vector<Clock::time_point> started;
      std::vector<int>* free_replies;
      int warmup, sample;
      bool timed(int i) const { return i >= warmup && (i - warmup) % sample == 0; }
    } run{this,          0,        {},    std::vector<Clock::time_point>(static_cast<std::size_t>(total)),
          &free_replies, c.warmup, sample};
    std::vector<double>& rtts = run.rtts;
    std::vector<Clock::time_point>& started = run.started;
    int& finished = run.finished;
    int issued = 0;
    unsigned polls = 0;
    auto t_start = Clock::now();
    while (finished < total) {
      while (issued < total && issued - finished < window) {
        int i = issued;
        if (i == c.warmup && window > 1 && finished < issued) break;
        if (i == c.warmup) t_start = Clock::now();
        if (run.timed(i)) started[static_cast<std::size_t>(i)] = Clock::now();
        Result r;
        sluice::CallOptions options;
        int slot = -1;
        if (zero) {
          slot = free_replies.back();
          free_replies.pop_back();
          options.reply_buffer = replies[static_cast<std::size_t>(slot)].span();
        }
        while ((r = link_.peer(e, 1)->call(
                    h, request_header, request, options, [run = &run, i, slot](absl::Status s, Message&) {
                      if (!s.ok()) run->bench->fail("call: " + s.ToString());
                      if (run->timed(i))
                        run->rtts.push_back(
                            std::chrono::duration<double>(Clock::now() - run->started[static_cast<std::size_t>(i)])
                                .count());
                      if (slot >= 0) run->free_replies->push_back(slot);
                      ++run->finished;
                    })) == Result::kWouldBlock) {
          progress_all();
        }
        if (r != Result::kOk) fail("call: " + std::string(sluice::to_string(r)));
        ++issued;
      }
      e.progress();
      if (bounce_ != nullptr && ++polls % 1024 == 0) keep_alive(e);
    }
    double s = std::chrono::duration<double>(Clock::now() - t_start).count();
    f = from_rtts(rtts, 1.0, c.size);
    f.rate = c.iters / s;
    f.bw_mbps = static_cast<double>(c.size) * f.rate / 1e6;
    return f;
  }

  Figures mixed(Engine& e, const Cmd& c) {
    // Ranks >= 2 stream 2 MiB messages to rank 1 (run_mixed_streamer) while rank 0 times
    // small RPCs to rank 1; rank 1 answers and absorbs the streams.
    if (n_ < 3 || me_ != 0) return {};
    return rpc(e, c, 1);
  }

  // Ranks >= 1 flood rank 0, whose application is busy for the first kFaninHold: its engine is
  // progressed, but the handler keeps every message instead of finishing it. Credits are what
  // stop the senders then; the raw baseline has none (RawUcx::fanin).
  Figures fanin(Engine& e, const Cmd& c) {
    Figures f;
    PageBuffer buf(c.size, static_cast<std::size_t>(o_.offset));
    int total = c.warmup + c.iters;
    if (me_ == 0) {
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
    } else {
      for (int i = 0; i < total; ++i) send_spin(e, 0, kFlood, buf.span());
      wait_for([&] { return acks_ >= 1; }, "rank 0's ack");
    }
    return f;
  }

  Figures run_one(const Cmd& c) {
    std::string t = c.test;
    if (c.mode == 1) return raw_->run(c, link_, kFaninHold);
    Engine& e = c.mode == 2 ? *bounce_ : main_;
    if (t == "am_lat") return am_lat(e, c);
    if (t == "am_bw") return stream(e, c, kBw);
    if (t == "am_submit" && me_ == 0)
      return submit_rate(e, *link_.peer(e, 1), kBw, c, o_, [this] { return acks_ == 1; });
    if (t == "am_submit") return stream(e, c, kBw);  // rank 1 counts and acknowledges as for am_bw
    if (t == "bulk_bw") return stream(e, c, kBulk);
    if (t == "rpc_lat") return rpc(e, c, 1);
    if (t == "rpc_rate") return rpc(e, c, c.window);
    if (t == "read") return rpc(e, c, 1, kRead);
    if (t == "write") return rpc(e, c, 1, kWrite);
    if (t == "mixed") return mixed(e, c);
    if (t == "fanin") return fanin(e, c);
    return {};
  }

  // Rank 0: tells everyone to run `c`, runs it, waits for everyone to finish.
  Figures drive(const Cmd& c) {
    done_count_ = 0;
    ready_count_ = 0;
    reset();
    holding_ = c.mode == 0 && std::string(c.test) == "fanin";  // from the first message on
    for (int r = 1; r < n_; ++r) send_spin(main_, r, kCmd, {}, std::as_bytes(std::span(&c, 1)));
    // The test's traffic may use another engine (the bounce baseline) than the command: nothing
    // orders the two, so wait until every rank has taken the command (and reset its counters).
    wait_for([&] { return ready_count_ == n_ - 1; }, "the other ranks to take the command");
    Figures f = run_one(c);
    if (std::string(c.test) == "am_lat" || std::string(c.test) == "mixed") {
      for (int r = 1; r < n_; ++r) send_spin(main_, r, kDone, {});  // "stop answering / streaming"
    }
    wait_for([&] { return done_count_ == n_ - 1; }, "the other ranks");
    return f;
  }

  // Other ranks: serve commands until told to quit.
  void serve() {
    while (true) {
      wait_for([&] { return have_cmd_; }, "a command from rank 0");
      have_cmd_ = false;
      Cmd c = pending_cmd_;
      if (c.mode == 3) return;
      send_spin(main_, 0, kReady, {});
      std::string t = c.test;
      if (t == "am_lat" || t == "mixed") {
        if (t == "mixed" && me_ >= 2) {
          run_mixed_streamer(c);
        } else {
          run_one(c);
          wait_for([&] { return done_count_ >= 1; }, "the end of the test");
        }
      } else {
        run_one(c);
      }
      send_spin(main_, 0, kDone, {});
    }
  }

  void run_mixed_streamer(const Cmd& c) {
    Engine& e = c.mode == 2 ? *bounce_ : main_;
    static std::vector<std::byte> big(std::size_t{2} << 20);
    int inflight = 0;
    while (done_count_ == 0) {
      while (inflight < 4) {
        Result r = link_.peer(e, 1)->send(kStream, {}, big, [&](absl::Status) { --inflight; });
        if (r != Result::kOk) break;
        ++inflight;
      }
      progress_all();
    }
    wait_for([&] { return inflight == 0; }, "stream completions");
  }

  void quit() {
    Cmd c{};
    std::snprintf(c.test, sizeof(c.test), "quit");
    c.mode = 3;
    for (int r = 1; r < n_; ++r) send_spin(main_, r, kCmd, {}, std::as_bytes(std::span(&c, 1)));
  }

  int rank() const { return me_; }
  int size() const { return n_; }

 private:
  sluice::Context& ctx_;
  Engine& main_;
  Engine* bounce_;
  sluice::perf::RawUcx* raw_;
  const Link& link_;
  const Options& o_;
  const bool zero_copy_ = o_.rpc == "zero";  // compared once: handlers run once per call
  int me_, n_;
  PageBuffer landing_;
  PageBuffer block_;  // what read replies carry
  Cmd pending_cmd_{};
  bool have_cmd_ = false;
  int ready_count_ = 0;
  int done_count_ = 0;
  int received_ = 0, replies_ = 0, acks_ = 0, completions_ = 0;
  bool holding_ = false;  // fanin: rank 0 keeps what arrives
  std::vector<Message> held_;
};

// A failed setup's exit status: 2 for what the command line got wrong, 1 otherwise.
int failed(const absl::Status& s) {
  std::fprintf(stderr, "sluice-perf: %s\n", s.ToString().c_str());
  return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  auto opts = parse(argc, argv);
  if (!opts) {
    usage(stderr);
    return 2;
  }
  Options& o = *opts;
  auto ctx = sluice::Context::create();
  if (!ctx.ok()) {
    std::fprintf(stderr, "sluice-perf: %s\n", ctx.status().ToString().c_str());
    return 1;
  }
  if (o.mode == "rank" && (*ctx)->size() < 2) {
    std::fprintf(stderr,
                 "sluice-perf: needs at least 2 ranks (sluice-run -n 2 sluice-perf ...), or -m cs with --server or "
                 "--connect\n");
    return 2;
  }
  auto engines = create_engines(**ctx, o);
  if (!engines.ok()) return failed(engines.status());
  // cs mode: the server takes the client's settings into `o` here.
  auto link = connect_sides(**ctx, *engines, o);
  if (!link.ok()) return failed(link.status());
  Bench bench(**ctx, *engines, *link, o);
  if (auto s = bench.setup(); !s.ok()) return failed(s);
  if (link->role() != 0) {
    bench.serve();
    return 0;
  }
  print_header(o, link->sides());
  auto rows = measure(o, link->size(), [&](const Cmd& c) { return bench.drive(c); });
  bench.quit();
  print_json(rows, o);
  if (o.stats) {
    std::printf("\n# sluice stats, %s, main engine\n%s", link->cs() ? "the client" : "rank 0",
                engines->main->stats().to_text().c_str());
  }
  return 0;
}
