// Credits that follow demand, between real engines over UCX (client/server mode, one process,
// each engine on its own thread): a client whose messages wait is lent more than
// SLUICE_CREDITS; when the server's receive budget is short, idle clients give theirs back to
// the one that waits, and the budget is never exceeded.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sluice/context.h>

#include "testing/ranks.h"

namespace sluice {
namespace {

constexpr HandlerId kBusy = 3, kIdle = 4, kEcho = 5;
const auto kLong = std::chrono::seconds(30);

using Node = testing_support::SingleEngine;

// Sends `n` numbered messages of `size` bytes (at least 4) as fast as the engine takes them.
void burst(Engine& e, Peer* to, std::uint32_t first, std::uint32_t n, std::size_t size = 4) {
  std::vector<std::byte> payload(std::max<std::size_t>(size, 4));
  for (std::uint32_t i = first; i < first + n; ++i) {
    std::memcpy(payload.data(), &i, sizeof(i));
    Result r;
    while ((r = to->send_copy(kBusy, {}, payload)) == Result::kWouldBlock) e.progress();
    ASSERT_EQ(r, Result::kOk);
  }
}

// Drives an engine on a thread of its own (it answers heartbeats and recalls) until stop().
class Idling {
 public:
  explicit Idling(Engine& e) : e_(e) {
    e_.release_thread();
    thread_ = std::thread([this] {
      e_.run_until([&] { return done_.load(); }, Clock::now() + std::chrono::seconds(120));
      e_.release_thread();
    });
  }
  void stop() {
    done_ = true;
    thread_.join();
  }

 private:
  Engine& e_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// A server that counts the busy client's messages (checking their order) and the idle one's.
struct Server {
  explicit Server(const Config& c) : node(c) {
    auto p = node.engine->listen("127.0.0.1:0");
    EXPECT_TRUE(p.ok()) << p.status();
    port = p.ok() ? *p : 0;
    EXPECT_TRUE(node.engine
                    ->register_handler(kBusy,
                                       [&](Message& m) {
                                         std::uint32_t v;
                                         std::memcpy(&v, m.payload().data(), sizeof(v));
                                         if (v != busy.load()) out_of_order = true;
                                         busy = v + 1;
                                       })
                    .ok());
    EXPECT_TRUE(node.engine->register_handler(kIdle, [&](Message&) { ++idle; }).ok());
    EXPECT_TRUE(
        node.engine->register_handler(kEcho, [](Message& m) { EXPECT_EQ(m.reply_copy({}, m.payload()), Result::kOk); })
            .ok());
  }
  // Serves until stop; then reads its counters (on its own thread, which drives it).
  void serve() {
    node.engine->release_thread();  // driven by the thread below from now on
    thread = std::thread([this] {
      for (auto until = Clock::now() + std::chrono::seconds(120); !stop && Clock::now() < until;) {
        if (!hold) {
          node.engine->run_until([&] { return stop.load() || hold.load(); }, until);
          continue;
        }
        still = true;  // not progressing: what peers send waits in the transport
        while (hold && !stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        still = false;
      }
      const Stats& s = node.engine->stats();
      for (const char* name : {"flow.peers_recalled", "flow.credits_reclaimed", "flow.credits_lent", "flow.credit_asks",
                               "mem.recv.hwm_bytes", "mem.send.hwm_bytes", "wire.parse_errors", "peers.failed",
                               "rpc.window_reclaimed", "rpc.window_widened", "rpc.window_refused"})
        stats[name] = s.value(name);
    });
  }
  void finish() {
    stop = true;
    thread.join();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }

  Node node;
  int port = 0;
  std::atomic<std::uint32_t> busy{0};
  std::atomic<int> idle{0};
  std::atomic<bool> out_of_order{false}, stop{false};
  std::atomic<bool> hold{false}, still{false};  // hold: stop progressing; still: it has
  std::thread thread;
  std::map<std::string, std::uint64_t> stats;
};

// A client that bursts `kCount` messages; what the server lent it (flow.credits_held at the
// client), with the server's counters checked.
std::uint64_t lent_to_a_bursting_client(const Config& c) {
  Server server(c);
  server.serve();
  constexpr std::uint32_t kCount = 20000;
  std::uint64_t held = 0;
  {
    Node client(c);
    auto peer = client.engine->connect(server.address());
    EXPECT_TRUE(peer.ok()) << peer.status();
    if (!peer.ok()) return 0;
    burst(*client.engine, *peer, 0, kCount);
    EXPECT_TRUE(client.engine->run_until([&] { return server.busy.load() == kCount; }, Clock::now() + kLong));
    held = client.engine->stats().value("flow.credits_held");
  }
  server.finish();
  EXPECT_FALSE(server.out_of_order);
  EXPECT_GE(server.stats["flow.credit_asks"], 1u);
  EXPECT_EQ(server.stats["flow.credits_lent"], held - c.credits);
  EXPECT_EQ(server.stats["wire.parse_errors"], 0u);
  return held;
}

// With 32 credits the server's shared-memory FIFO has 256 elements (2 x (3 x 32 + 16), rounded
// up to a power of two), of which one sender may leave half: 37 credits' worth (3 x 37 + 16).
constexpr std::uint32_t kCredits = 32, kFifoCredits = 37;

TEST(Loans, AClientWhoseMessagesWaitIsLentMoreThanSluiceCredits) {
  Config c = *Config::from_env();
  c.cs_transport = CsTransport::kStream;  // no FIFO to bound the loans (next test)
  c.credits = kCredits;
  c.credits_max = 128;
  std::uint64_t held = lent_to_a_bursting_client(c);
  EXPECT_GT(held, kFifoCredits) << "the server lent it more than its first grant, and more than through its FIFO";
  EXPECT_LE(held, c.credits_max);
}

// A local client's messages come through the server's shared-memory FIFO, sized for what one
// sender can leave in it with SLUICE_CREDITS: it is lent no more than that, whatever
// SLUICE_CREDITS_MAX allows (a full FIFO of a dead process keeps its memory mapped for good).
TEST(Loans, AClientOverSharedMemoryIsLentNoMoreThanTheServersFifoHolds) {
  Config c = *Config::from_env();
  c.cs_transport = CsTransport::kAuto;  // UCX over shared memory: the same host
  c.credits = kCredits;
  c.credits_max = 128;
  std::uint64_t held = lent_to_a_bursting_client(c);
  EXPECT_EQ(held, kFifoCredits) << "lent up to what the FIFO holds, not to SLUICE_CREDITS_MAX";
}

TEST(Loans, IdleClientsGiveBackWhatABusyClientWaitsForWithinTheBudget) {
  Config c = *Config::from_env();
  // Over the stream: through the shared-memory FIFO the busy client would be lent no more than
  // 37 (the FIFO's cap, tested above), which the budget here holds without a recall.
  c.cs_transport = CsTransport::kStream;
  c.heartbeat = std::chrono::milliseconds(100);  // idle after 100 ms
  c.pool_chunk = 64 << 10;
  // 90 receive slots of 8256 B: the idle client is granted 32 credits and 8 posted receives,
  // the busy one (a HELLO takes at most half the room left) 17 and 8; what it is lent beyond
  // the 25 slots left must come from the idle one's credits.
  c.recv_pool_max = std::size_t{90} * 8256;
  Server server(c);
  server.serve();
  Node idle(c), busy(c);
  auto to_server = idle.engine->connect(server.address());
  ASSERT_TRUE(to_server.ok()) << to_server.status();
  std::uint32_t one = 1;
  ASSERT_EQ((*to_server)->send_copy(kIdle, {}, std::as_bytes(std::span(&one, 1))), Result::kOk);
  ASSERT_TRUE(idle.engine->run_until([&] { return server.idle.load() == 1; }, Clock::now() + kLong));
  Idling idling(*idle.engine);
  // The busy client sends until it is lent more than the budget had free (the idle one is
  // recalled once it has been quiet for a heartbeat interval), or for 10 s.
  auto peer = busy.engine->connect(server.address());
  ASSERT_TRUE(peer.ok()) << peer.status();
  std::uint32_t sent = 0;
  std::uint64_t held = 0;
  for (auto until = Clock::now() + std::chrono::seconds(10); held <= 42 && Clock::now() < until; sent += 2000) {
    burst(*busy.engine, *peer, sent, 2000);
    held = busy.engine->stats().value("flow.credits_held");
  }
  ASSERT_TRUE(busy.engine->run_until([&] { return server.busy.load() == sent; }, Clock::now() + kLong));
  idling.stop();
  // The idle client is alive and may still send, within the floor it kept.
  for (int i = 0; i < 5; ++i)
    ASSERT_EQ((*to_server)->send_copy(kIdle, {}, std::as_bytes(std::span(&one, 1))), Result::kOk);
  ASSERT_TRUE(idle.engine->run_until([&] { return server.idle.load() == 6; }, Clock::now() + kLong));
  std::uint64_t idle_held = idle.engine->stats().value("flow.credits_held");
  server.finish();
  EXPECT_FALSE(server.out_of_order);
  EXPECT_EQ(server.stats["flow.peers_recalled"], 1u) << "the idle client was asked to come down";
  EXPECT_EQ(server.stats["flow.credits_reclaimed"], 30u) << "and gave back all but the floor of 2";
  EXPECT_EQ(idle_held, 2u);
  EXPECT_GT(held, 32u + 10u) << "the busy client was lent more than the budget had free";
  EXPECT_LE(server.stats["mem.recv.hwm_bytes"], c.recv_pool_max);
  EXPECT_EQ(server.stats["peers.failed"], 0u);
  EXPECT_EQ(server.stats["wire.parse_errors"], 0u);
}

// Over Sluice's TCP transport, what waits at the server for no posted receive is bounded by
// what a client may be granted, not by SLUICE_CREDITS: a client lent up to SLUICE_CREDITS_MAX
// that fills every credit while the server is not progressing is served, not failed.
TEST(Loans, AStreamClientThatFillsItsLentCreditsIsServedWhenTheServerComesBack) {
  Config c = *Config::from_env();
  c.cs_transport = CsTransport::kStream;
  c.credits = 8;
  c.rpc_window = 8;
  Server server(c);
  server.serve();
  Node client(c);
  auto peer = client.engine->connect(server.address());
  ASSERT_TRUE(peer.ok()) << peer.status();
  std::uint32_t sent = 0;
  std::uint64_t held = 0;
  for (auto until = Clock::now() + std::chrono::seconds(10); held < c.credits_max && Clock::now() < until;
       sent += 2000) {
    burst(*client.engine, *peer, sent, 2000, c.eager_limit() - 64);
    held = client.engine->stats().value("flow.credits_held");
  }
  ASSERT_TRUE(client.engine->run_until([&] { return server.busy.load() == sent; }, Clock::now() + kLong));
  // Its credits come back; then the server stops and the client fills them with messages just
  // under the eager limit (the stream sends those at once, larger ones wait for a landing):
  // more than SLUICE_CREDITS and the RPC window once bounded.
  client.engine->run_until([] { return false; }, Clock::now() + std::chrono::milliseconds(300));
  server.hold = true;
  while (!server.still) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::vector<std::byte> payload(c.eager_limit() - 64);
  std::uint32_t filled = 0;
  for (; (*peer)->can_send_now(); ++filled, ++sent) {
    std::memcpy(payload.data(), &sent, sizeof(sent));
    ASSERT_EQ((*peer)->send_copy(kBusy, {}, payload), Result::kOk);
  }
  client.engine->run_until([] { return false; }, Clock::now() + std::chrono::milliseconds(200));
  server.hold = false;
  EXPECT_TRUE(
      client.engine->run_until([&] { return server.busy.load() == sent || !(*peer)->alive(); }, Clock::now() + kLong));
  EXPECT_TRUE((*peer)->alive());
  server.finish();
  EXPECT_GT(filled, c.credits + 2 * c.rpc_window + 16) << "lent " << held;
  EXPECT_FALSE(server.out_of_order);
  EXPECT_EQ(server.stats["peers.failed"], 0u);
  EXPECT_EQ(server.stats["wire.parse_errors"], 0u);
}

// Keeps `window` calls to kEcho in flight until `enough` or 10 s; the calls that failed.
int keep_calling(Engine& e, Peer* to, int window, const std::function<bool()>& enough) {
  int outstanding = 0, failed = 0;
  std::uint32_t v = 7;
  for (auto until = Clock::now() + std::chrono::seconds(10); !enough() && Clock::now() < until;) {
    while (outstanding < window &&
           to->call(kEcho, {}, std::as_bytes(std::span(&v, 1)), {}, [&](const absl::Status& s, Message&) {
             --outstanding;
             failed += s.ok() ? 0 : 1;
           }) == Result::kOk)
      ++outstanding;
    e.progress();
  }
  e.run_until([&] { return outstanding == 0; }, Clock::now() + kLong);
  return failed;
}

TEST(Loans, IdleClientsGiveBackTheirRpcWindowToABusyCallerWithinTheSendBudget) {
  Config c = *Config::from_env();
  c.heartbeat = std::chrono::milliseconds(100);
  c.pool_chunk = 64 << 10;
  // A send budget of 100 reply slots of 8256 B: a HELLO takes at most half the room left, so
  // the idle client gets 25 calls (50 slots), the busy one 12, and the busy one can reach 32
  // only with the idle one's; no further (SLUICE_RPC_WINDOW_MAX is the next test's).
  c.send_pool_max = std::size_t{100} * 8256;
  c.rpc_window_max = c.rpc_window;
  Server server(c);
  server.serve();
  Node idle(c), busy(c);
  auto to_server = idle.engine->connect(server.address());
  ASSERT_TRUE(to_server.ok()) << to_server.status();
  EXPECT_EQ(keep_calling(*idle.engine, *to_server, 1, [] { return true; }), 0);
  std::uint64_t idle_first = idle.engine->stats().value("rpc.window_held");
  Idling idling(*idle.engine);
  auto peer = busy.engine->connect(server.address());
  ASSERT_TRUE(peer.ok()) << peer.status();
  std::uint64_t first = 0, held = 0;
  int failed = keep_calling(*busy.engine, *peer, 32, [&] {
    held = busy.engine->stats().value("rpc.window_held");
    if (first == 0) first = held;
    return held == 32;
  });
  idling.stop();
  EXPECT_EQ(keep_calling(*idle.engine, *to_server, 1, [] { return true; }), 0) << "the idle client still calls";
  std::uint64_t idle_held = idle.engine->stats().value("rpc.window_held");
  server.finish();
  EXPECT_EQ(failed, 0);
  EXPECT_LT(first, 32u) << "the budget held back less than a full window for the second client";
  EXPECT_EQ(held, 32u) << "widened to SLUICE_RPC_WINDOW as its calls waited";
  EXPECT_EQ(idle_held, 1u) << "the idle client was recalled to one call";
  EXPECT_GT(idle_first, 1u);
  EXPECT_EQ(server.stats["rpc.window_reclaimed"], idle_first - 1);
  EXPECT_EQ(server.stats["rpc.window_refused"], 0u) << "no call was refused for the window";
  EXPECT_LE(server.stats["mem.send.hwm_bytes"], c.send_pool_max);
  EXPECT_EQ(server.stats["peers.failed"], 0u);
  EXPECT_EQ(server.stats["wire.parse_errors"], 0u);
}

// A caller that keeps more calls in flight than SLUICE_RPC_WINDOW is widened by demand up to
// SLUICE_RPC_WINDOW_MAX, no further, and every call is answered.
TEST(Loans, ACallerWithMoreCallsThanTheWindowIsWidenedUpToTheMax) {
  Config c = *Config::from_env();
  c.rpc_window = 8;
  c.rpc_window_max = 24;
  Server server(c);
  server.serve();
  Node client(c);
  auto peer = client.engine->connect(server.address());
  ASSERT_TRUE(peer.ok()) << peer.status();
  std::uint64_t first = 0, held = 0;
  int failed = keep_calling(*client.engine, *peer, 64, [&] {
    held = client.engine->stats().value("rpc.window_held");
    if (first == 0) first = held;
    return held >= c.rpc_window_max;
  });
  // Calls go on past the widening: the window stays at the max.
  failed += keep_calling(*client.engine, *peer, 64, [&, n = 0]() mutable { return ++n > 20000; });
  std::uint64_t last = client.engine->stats().value("rpc.window_held");
  server.finish();
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(first, c.rpc_window) << "the handshake grants SLUICE_RPC_WINDOW";
  EXPECT_EQ(held, c.rpc_window_max) << "widened to SLUICE_RPC_WINDOW_MAX as its calls waited";
  EXPECT_EQ(last, c.rpc_window_max) << "and no further";
  EXPECT_EQ(server.stats["rpc.window_widened"], c.rpc_window_max - c.rpc_window);
  EXPECT_EQ(server.stats["rpc.window_refused"], 0u);
  EXPECT_EQ(server.stats["peers.failed"], 0u);
  EXPECT_EQ(server.stats["wire.parse_errors"], 0u);
}

// A HELLO that finds the send budget short of a full window (beyond the newcomers' share) makes
// the server recall idle clients' windows, walk after walk, until a full one fits again: the
// client that comes next gets SLUICE_RPC_WINDOW. (In a storm of connects every HELLO counts: the
// newcomers' share must not be the first thing spent.)
TEST(Loans, AShortWindowRecallsIdleClientsUntilAFullWindowFitsAgain) {
  Config c = *Config::from_env();
  c.heartbeat = std::chrono::milliseconds(100);
  c.pool_chunk = 64 << 10;
  // 1,200 reply slots of 8256 B, 75 of them the newcomers' share: 17 clients get a full window
  // of 32 calls (64 slots), the 18th 18 calls, and the 112 slots left still hold one full window.
  c.send_pool_max = std::size_t{1200} * 8256;
  Server server(c);
  server.serve();
  auto ctx = Context::create(ContextOptions{.config = c, .bootstrap = std::move(make_in_process_group(1).front())});
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  std::vector<std::unique_ptr<Engine>> clients;
  auto drive = [&](std::chrono::milliseconds d) {
    for (auto until = Clock::now() + d; Clock::now() < until; std::this_thread::sleep_for(std::chrono::milliseconds(1)))
      for (auto& e : clients) e->progress();
  };
  auto connect = [&]() -> std::uint64_t {
    auto e = (*ctx)->create_engine();
    EXPECT_TRUE(e.ok()) << e.status();
    if (!e.ok()) return 0;
    clients.push_back(std::move(*e));
    auto peer = clients.back()->connect(server.address());
    EXPECT_TRUE(peer.ok()) << peer.status();
    return clients.back()->stats().value("rpc.window_held");
  };
  std::vector<std::uint64_t> first;  // each client's window after its connect
  for (int i = 0; i < 17; ++i) {
    first.push_back(connect());
    ASSERT_EQ(first.back(), 32u) << "client " << i;
  }
  first.push_back(connect());
  ASSERT_LT(first.back(), 32u) << "the 18th client's HELLO found the budget short";
  drive(std::chrono::milliseconds(600));  // six heartbeat intervals: every client idle
  EXPECT_EQ(connect(), 32u) << "the idle clients' windows came back";
  drive(std::chrono::milliseconds(100));
  std::uint64_t recalled = 0, given_back = 0;
  for (std::size_t i = 0; i < first.size(); ++i)
    if (clients[i]->stats().value("rpc.window_held") == 1) ++recalled, given_back += first[i] - 1;
  clients.clear();  // orderly closes, answered by the server
  server.finish();
  EXPECT_GE(recalled, 1u);
  EXPECT_EQ(server.stats["flow.peers_recalled"], recalled) << "each recalled client came down to one call";
  EXPECT_EQ(server.stats["rpc.window_reclaimed"], given_back) << "and its reply slots went back";
  EXPECT_LE(server.stats["mem.send.hwm_bytes"], c.send_pool_max);
  EXPECT_EQ(server.stats["peers.failed"], 0u);
}

}  // namespace
}  // namespace sluice
