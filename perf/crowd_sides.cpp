// sluice-perf -t crowd's child processes: the server, the busy clients and the idle ones
// (crowd.h). Each engine is driven by one thread; the process's main thread talks to the parent
// and wakes the engines with post() when it has something for them.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "crowd.h"
#include "report.h"

namespace sluice::perf::crowd {
namespace {

using Seconds = std::chrono::duration<double>;

// Every kSample-th call of a busy engine is timed (as rpc_rate samples its calls).
constexpr int kSample = 16;
// Busy engines call this long before their measured interval starts.
constexpr auto kWarmup = std::chrono::milliseconds(300);

[[noreturn]] void die(int fd, const std::string& what) {
  say(fd, "error " + what);
  std::fprintf(stderr, "sluice-perf: crowd (pid %d): %s\n", static_cast<int>(::getpid()), what.c_str());
  std::_Exit(1);
}

std::unique_ptr<Context> context(int fd) {
  auto ctx = Context::create();
  if (!ctx.ok()) die(fd, ctx.status().ToString());
  return std::move(*ctx);
}

std::unique_ptr<Engine> engine(int fd, Context& ctx) {
  auto e = ctx.create_engine();
  if (!e.ok()) die(fd, "engine: " + e.status().ToString());
  return std::move(*e);
}

// Connect times of one process's engines, for its "connected" line.
struct Connects {
  int ok = 0, failed = 0;
  double seconds = 0, max_seconds = 0;
  std::string first_error;

  // Connects `e` to `address`, timed; the peer, or nullptr when it failed.
  Peer* connect(Engine& e, const std::string& address) {
    auto t0 = Clock::now();
    auto peer = e.connect(address);
    double s = Seconds(Clock::now() - t0).count();
    seconds += s;
    max_seconds = std::max(max_seconds, s);
    if (peer.ok()) return ++ok, *peer;
    if (first_error.empty()) first_error = peer.status().ToString();
    ++failed;
    return nullptr;
  }
  void add(const Connects& c) {
    ok += c.ok, failed += c.failed, seconds += c.seconds;
    max_seconds = std::max(max_seconds, c.max_seconds);
    if (first_error.empty()) first_error = c.first_error;
  }
  void report(int fd) const {
    char line[128];
    std::snprintf(line, sizeof(line), "connected %d %d %.6f %.6f", ok, failed, seconds, max_seconds);
    say(fd, line);
    if (!first_error.empty()) std::fprintf(stderr, "sluice-perf: crowd: connect: %s\n", first_error.c_str());
  }
};

// What one busy engine measured in one run.
struct Measured {
  std::uint64_t calls = 0, errors = 0;
  std::vector<double> rtts;  // seconds, of the sampled calls
};

// A run the busy process's main thread hands its engines.
struct Run {
  int k = 0, window = 32;
  std::size_t size = 8;
  Clock::time_point start, end;  // the measured interval
};

// What one busy engine's calls update, behind one pointer: a reply callback capturing it and
// its call's start fits the callable's inline storage (no allocation per call).
struct Calls {
  int inflight = 0;
  bool counting = false;  // in the measured interval
  Measured m;
};

// Calls the echo method with `run.window` in flight until `run.end`, counting the replies that
// arrive in [start, end).
Measured call_for(Engine& e, Peer& peer, const Run& run) {
  std::vector<std::byte> request(run.size);
  Calls calls;
  std::uint64_t issued = 0;
  bool failed = false;
  while (!failed) {
    auto now = Clock::now();
    if (now >= run.end) break;
    calls.counting = now >= run.start;
    while (calls.inflight < run.window) {
      // Every kSample-th call in the interval is timed: t0 is its start (otherwise zero).
      auto t0 = calls.counting && issued % kSample == 0 ? Clock::now() : Clock::time_point{};
      Result r = peer.call(kEcho, request, {}, [c = &calls, t0](const absl::Status& s, Message&) {
        --c->inflight;
        if (!s.ok()) ++c->m.errors;
        else if (c->counting) ++c->m.calls;
        if (t0 != Clock::time_point{} && s.ok()) c->m.rtts.push_back(Seconds(Clock::now() - t0).count());
      });
      if (r == Result::kWouldBlock) break;
      if (r != Result::kOk) {
        ++calls.m.errors, failed = true;
        break;
      }
      ++calls.inflight, ++issued;
    }
    e.progress();
  }
  calls.counting = false;
  // Every call completes (a failed peer's with Unavailable): the callbacks point at `calls`.
  e.run_until([&] { return calls.inflight == 0; });
  return calls.m;
}

// The busy process's engines and what passes between them and its main thread.
class BusyClients {
 public:
  BusyClients(int fd, const std::string& address, int n) : fd_(fd), address_(address), measured_(n) {
    ctx_ = context(fd);
    for (int i = 0; i < n; ++i) engines_.push_back(engine(fd, *ctx_));
  }

  // Connects each engine on its own thread, one after another, and says how that went.
  void start() {
    for (std::size_t i = 0; i < engines_.size(); ++i) {
      threads_.emplace_back([this, i] { drive(i); });
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return finished_ == i + 1; });
    }
    connects_.report(fd_);
    if (connects_.failed > 0) die(fd_, "a busy client could not connect");
  }

  // Runs `run` on the first run.k engines; the line for the parent.
  std::string run(Run run) {
    {
      std::lock_guard lock(mu_);
      run_ = run;
      finished_ = 0;
      ++generation_;
    }
    for (auto& e : engines_) e->post([] {});
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return finished_ == engines_.size(); });
    return done_line(run);
  }

  void quit() {
    {
      std::lock_guard lock(mu_);
      quit_ = true;
    }
    for (auto& e : engines_) e->post([] {});
    posted_ = true;
    posted_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  // Engine i's thread: connects, then runs what the main thread hands it until told to quit.
  void drive(std::size_t i) {
    Engine& e = *engines_[i];
    Peer* peer = connects_.connect(e, address_);
    std::uint64_t seen = 0;
    while (true) {
      finish();
      e.run_until([&] {
        std::lock_guard lock(mu_);
        return quit_ || generation_ != seen;
      });
      std::unique_lock lock(mu_);
      if (quit_) break;
      seen = generation_;
      Run run = run_;
      lock.unlock();
      measured_[i] = static_cast<int>(i) < run.k && peer != nullptr ? call_for(e, *peer, run) : Measured{};
    }
    posted_.wait(false);  // the main thread is done posting to the engines
    engines_[i].reset();  // the orderly close, on the engine's own thread
  }
  void finish() {
    std::lock_guard lock(mu_);
    ++finished_;
    cv_.notify_all();
  }
  std::string done_line(const Run& run) const {
    std::vector<double> us;
    std::uint64_t errors = 0;
    for (int i = 0; i < run.k; ++i) {
      errors += measured_[static_cast<std::size_t>(i)].errors;
      for (double s : measured_[static_cast<std::size_t>(i)].rtts) us.push_back(s * 1e6);
    }
    double avg = 0;
    for (double u : us) avg += u / static_cast<double>(us.size());
    std::ostringstream line;
    line << "done " << errors << " " << percentile(us, 0.5) << " " << percentile(us, 0.99) << " " << avg;
    double seconds = Seconds(run.end - run.start).count();
    for (int i = 0; i < run.k; ++i)
      line << " " << static_cast<double>(measured_[static_cast<std::size_t>(i)].calls) / seconds;
    return line.str();
  }

  int fd_;
  std::string address_;
  std::unique_ptr<Context> ctx_;
  std::vector<std::unique_ptr<Engine>> engines_;
  std::vector<std::thread> threads_;
  std::vector<Measured> measured_;
  Connects connects_;  // written by one connecting thread at a time
  std::mutex mu_;
  std::condition_variable cv_;
  std::size_t finished_ = 0;
  std::uint64_t generation_ = 0;
  Run run_;
  bool quit_ = false;
  std::atomic<bool> posted_ = false;
};

// "run K SIZE WINDOW SECONDS" as a Run starting now.
Run parse_run(const std::string& line) {
  std::istringstream in(line.substr(4));
  Run run;
  double seconds = 0;
  in >> run.k >> run.size >> run.window >> seconds;
  run.start = Clock::now() + kWarmup;
  run.end = run.start + std::chrono::duration_cast<Clock::duration>(Seconds(seconds));
  return run;
}

}  // namespace

void serve(int fd) {
  // A session of its own, as a server daemon's: where the kernel groups scheduling by session
  // (autogroup, on by default in Debian's), the CPU is then shared between the server and the
  // clients' session, not between its one thread and hundreds of the clients'. In one session,
  // 500 idle engines tearing down at once left the server runnable but waiting for 100-500 ms
  // of every 100 ms, past their closes' deadline for its goodbyes.
  (void)::setsid();
  auto ctx = context(fd);
  auto e = engine(fd, *ctx);
  auto echo = [](Message& m) {
    if (m.reply_with_payload({}) != Result::kOk) std::fprintf(stderr, "sluice-perf: crowd server: a reply failed\n");
  };
  if (auto s = e->register_handler(kEcho, echo); !s.ok()) die(fd, s.ToString());
  auto port = e->listen("127.0.0.1:0");
  if (!port.ok()) die(fd, port.status().ToString());
  say(fd, "port " + std::to_string(*port));
  std::atomic<bool> quit = false;
  // The parent's lines: read on a thread of their own, so that the engine sleeps as a server's
  // would (run_until) and is woken only for what the parent asks.
  std::thread reader([&] {
    Lines lines(fd);
    while (auto line = lines.next()) {
      if (*line != "stats") break;
      e->post([&] {
        auto ps = e->pool_stats(Direction::kRecv);
        say(fd, "stats " + std::to_string(ps.high_water_bytes) + " " + std::to_string(ps.budget_bytes));
      });
    }
    quit = true;
    e->post([] {});
  });
  e->run_until([&] { return quit.load(); });
  reader.join();
  e.reset();
  std::_Exit(0);
}

void busy(int fd, const std::string& address, int engines) {
  BusyClients clients(fd, address, engines);
  clients.start();
  Lines lines(fd);
  while (auto line = lines.next()) {
    if (line->rfind("run ", 0) != 0) break;
    say(fd, clients.run(parse_run(*line)));
  }
  clients.quit();
  std::_Exit(0);
}

namespace {

// Connects every engine of `all` to `address` at once, a thread each. Each thread drives its
// engine until every connect has ended (the early ones keep up their heartbeats meanwhile), then
// lets go of it. The peers, nullptr where a connect failed.
std::vector<Peer*> connect_at_once(std::vector<std::unique_ptr<Engine>>& all, const std::string& address,
                                   Connects& connects) {
  std::vector<Connects> each(all.size());
  std::vector<Peer*> peers(all.size());
  std::atomic<std::size_t> ended = 0;
  std::vector<std::thread> threads;
  threads.reserve(all.size());
  for (std::size_t i = 0; i < all.size(); ++i)
    threads.emplace_back([&, i] {
      Engine& e = *all[i];
      peers[i] = each[i].connect(e, address);
      // The last to end wakes the others (post()): a thousand engines polled every few
      // milliseconds would take the machine the storm needs.
      if (++ended == all.size())
        for (auto& other : all) other->post([] {});
      while (ended.load() < all.size()) e.wait(Clock::now() + std::chrono::seconds(1));
      e.release_thread();
    });
  for (auto& t : threads) t.join();
  for (const Connects& c : each) connects.add(c);
  return peers;
}

// One process's idle engines and their peers (nullptr where the connect failed).
struct IdleEngines {
  std::vector<std::unique_ptr<Engine>> all;
  std::vector<Peer*> peers;
  Connects connects;
};

// `engines` engines of `ctx` connected to `address`: one after another, or all at once once
// the parent says "go" (after this process's "ready": its engines exist). Then `connected(i)`
// for each engine i; in the sequential case it runs right after engine i's connect, so that it
// can keep the engines connected so far driven.
void connect_idle(int fd, Lines& lines, Context& ctx, const std::string& address, int engines, bool at_once,
                  IdleEngines& idle, const std::function<void(std::size_t)>& connected) {
  idle.all.reserve(static_cast<std::size_t>(engines));  // the engines' threads index it
  for (int i = 0; i < engines; ++i) {
    idle.all.push_back(engine(fd, ctx));
    if (!at_once) {
      idle.peers.push_back(idle.connects.connect(*idle.all.back(), address));
      connected(idle.all.size() - 1);
    }
  }
  if (!at_once) return;
  say(fd, "ready");
  if (lines.next() != "go") std::_Exit(0);  // the parent went away, or ended the run
  idle.peers = connect_at_once(idle.all, address, idle.connects);
  for (std::size_t i = 0; i < idle.all.size(); ++i) connected(i);
}

// Waits for the parent's word `word` (false when the parent is gone).
bool await_word(Lines& lines, const std::string& word) {
  while (auto line = lines.next())
    if (*line == word) return true;
  return false;
}

// A thread per engine, asleep in it (Engine::wait), woken by what arrives and by its timers.
void idle_threads(int fd, const std::string& address, int engines, bool at_once) {
  auto ctx = context(fd);
  IdleEngines idle;
  std::vector<std::thread> threads;
  std::atomic<bool> quit = false, close = false, posted = false;
  std::atomic<int> alive = 0, counted = 0;
  Lines lines(fd);
  connect_idle(fd, lines, *ctx, address, engines, at_once, idle, [&](std::size_t i) {
    Engine* e = idle.all[i].get();
    Peer* peer = idle.peers[i];
    if (!at_once) e->release_thread();
    threads.emplace_back([e, peer, &quit, &close, &posted, &alive, &counted, &idle, i] {
      while (!quit.load()) e->wait(Clock::now() + std::chrono::seconds(1));
      if (peer != nullptr && peer->alive()) ++alive;
      ++counted;
      while (!close.load()) e->wait(Clock::now() + std::chrono::seconds(1));
      posted.wait(false);  // the main thread is done posting to the engines
      idle.all[i].reset();
    });
  });
  idle.connects.report(fd);
  bool told = await_word(lines, "quit");
  quit = true;
  for (auto& e : idle.all) e->post([] {});
  while (counted.load() < static_cast<int>(threads.size())) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  say(fd, "alive " + std::to_string(alive.load()) + " 0 0");
  if (told) await_word(lines, "close");
  close = true;
  for (auto& e : idle.all) e->post([] {});
  posted = true;
  posted.notify_all();
  for (auto& t : threads) t.join();
}

// The idle engines' own calls (--idle-calls), each counted when made and when it failed.
// Atomic: calls still out when the engines close (a thread each) end on those threads.
struct IdleCalls {
  std::atomic<int> made = 0, failed = 0, outstanding = 0;

  // One call to the echo method (none when the connect failed: `peer` is nullptr).
  void call(Peer* peer) {
    if (peer == nullptr) return;
    static constexpr std::array<std::byte, 8> kRequest{};
    ++made;
    Result r = peer->call(kEcho, kRequest, {}, [this](const absl::Status& s, Message&) {
      --outstanding;
      failed += s.ok() ? 0 : 1;
    });
    if (r == Result::kOk) ++outstanding;
    else ++failed;
  }
  // The answers to the calls out, then `n` calls of every engine, one at a time each. A call
  // unanswered for 30 s ends the rounds; it counts as failed (and fails when its engine closes).
  void rounds(IdleEngines& idle, int n) {
    for (int i = 0;; ++i) {
      for (auto until = Clock::now() + std::chrono::seconds(30); outstanding > 0 && Clock::now() < until;) {
        bool any = false;
        for (auto& e : idle.all) any = e->progress() || any;
        if (!any) std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      if (outstanding > 0 || i == n) return;
      for (Peer* p : idle.peers) call(p);
    }
  }
};

// The main thread drives every engine: progress() on each every `poll`, asleep in between.
// With `calls`, every engine calls that many times once connected and again after "quit", and
// every second one once per poll in between.
void idle_polled(int fd, const std::string& address, int engines, bool at_once, std::chrono::milliseconds poll,
                 int calls) {
  auto ctx = context(fd);
  IdleEngines idle;
  IdleCalls made;
  Lines lines(fd);
  connect_idle(fd, lines, *ctx, address, engines, at_once, idle, [&](std::size_t) {
    for (auto& e : idle.all) e->progress();
  });
  made.rounds(idle, calls);
  idle.connects.report(fd);
  while (true) {
    auto line = lines.next(Clock::now() + poll);
    if ((line && *line == "quit") || lines.eof()) break;
    for (std::size_t i = 1; calls > 0 && i < idle.peers.size(); i += 2) made.call(idle.peers[i]);
    for (auto& e : idle.all) e->progress();
  }
  made.rounds(idle, calls);
  int alive = 0;
  for (Peer* p : idle.peers) alive += p != nullptr && p->alive() ? 1 : 0;
  say(fd, "alive " + std::to_string(alive) + " " + std::to_string(made.made.load()) + " " +
              std::to_string(made.failed + made.outstanding));
  // Its engines stay progressed until every process has counted (the parent's "close"): the
  // closes of hundreds of engines take the machine, and none may count meanwhile.
  while (!lines.eof()) {
    auto line = lines.next(Clock::now() + poll);
    if (line && *line == "close") break;
    for (auto& e : idle.all) e->progress();
  }
  // The orderly closes at once, a thread each: one after another, the engines still open would
  // go unprogressed for as long as the closes before them take, and the server would find them
  // silent (SLUICE_PEER_TIMEOUT) before their goodbyes.
  std::vector<std::thread> closes;
  closes.reserve(idle.all.size());
  for (auto& e : idle.all) closes.emplace_back([e = std::move(e)]() mutable { e.reset(); });
  for (auto& t : closes) t.join();
}

}  // namespace

void idle(int fd, const std::string& address, int engines, bool at_once, int poll_ms, int calls) {
  if (poll_ms > 0) idle_polled(fd, address, engines, at_once, std::chrono::milliseconds(poll_ms), calls);
  else idle_threads(fd, address, engines, at_once);
  std::_Exit(0);
}

}  // namespace sluice::perf::crowd
