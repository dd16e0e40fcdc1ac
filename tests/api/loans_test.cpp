// Credits that follow demand, between real engines over UCX (client/server mode, one process,
// each engine on its own thread): a client whose messages wait is lent more than
// SLUICE_CREDITS; when the server's receive budget is short, idle clients give theirs back to
// the one that waits, and the budget is never exceeded.
#include <atomic>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sluice/context.h>

#include "testing/ranks.h"

namespace sluice {
namespace {

constexpr HandlerId kBusy = 3, kIdle = 4;
const auto kLong = std::chrono::seconds(30);

using Node = testing_support::SingleEngine;

// Sends `n` numbered messages as fast as the engine takes them.
void burst(Engine& e, Peer* to, std::uint32_t first, std::uint32_t n) {
  for (std::uint32_t i = first; i < first + n; ++i) {
    Result r;
    while ((r = to->send_copy(kBusy, {}, std::as_bytes(std::span(&i, 1)))) == Result::kWouldBlock) e.progress();
    ASSERT_EQ(r, Result::kOk);
  }
}

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
  }
  // Serves until stop; then reads its counters (on its own thread, which drives it).
  void serve() {
    node.engine->release_thread();  // driven by the thread below from now on
    thread = std::thread([this] {
      node.engine->run_until([&] { return stop.load(); }, Clock::now() + std::chrono::seconds(120));
      const Stats& s = node.engine->stats();
      for (const char* name : {"flow.peers_recalled", "flow.credits_reclaimed", "flow.credits_lent", "flow.credit_asks",
                               "mem.recv.hwm_bytes", "wire.parse_errors", "peers.failed"})
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
  std::thread thread;
  std::map<std::string, std::uint64_t> stats;
};

TEST(Loans, AClientWhoseMessagesWaitIsLentMoreThanSluiceCredits) {
  Config c = *Config::from_env();
  Server server(c);
  server.serve();
  constexpr std::uint32_t kCount = 20000;
  std::uint64_t held = 0;
  {
    Node client(c);
    auto peer = client.engine->connect(server.address());
    ASSERT_TRUE(peer.ok()) << peer.status();
    burst(*client.engine, *peer, 0, kCount);
    ASSERT_TRUE(client.engine->run_until([&] { return server.busy.load() == kCount; }, Clock::now() + kLong));
    held = client.engine->stats().value("flow.credits_held");
  }
  server.finish();
  EXPECT_FALSE(server.out_of_order);
  EXPECT_GT(held, c.credits) << "the server lent it more than its first grant";
  EXPECT_LE(held, std::max(c.credits, c.credits_max));
  EXPECT_GE(server.stats["flow.credit_asks"], 1u);
  EXPECT_EQ(server.stats["flow.credits_lent"], held - c.credits);
  EXPECT_EQ(server.stats["wire.parse_errors"], 0u);
}

TEST(Loans, IdleClientsGiveBackWhatABusyClientWaitsForWithinTheBudget) {
  Config c = *Config::from_env();
  c.heartbeat = std::chrono::milliseconds(100);  // idle after 100 ms
  c.pool_chunk = 64 << 10;
  // Room for two first grants (32 credits and 8 posted receives each, 8256-byte slots) and 10
  // slots more: the busy client's loan must come from the idle one's credits.
  c.recv_pool_max = std::size_t{90} * 8256;
  Server server(c);
  server.serve();
  Node idle(c), busy(c);
  auto to_server = idle.engine->connect(server.address());
  ASSERT_TRUE(to_server.ok()) << to_server.status();
  std::uint32_t one = 1;
  ASSERT_EQ((*to_server)->send_copy(kIdle, {}, std::as_bytes(std::span(&one, 1))), Result::kOk);
  ASSERT_TRUE(idle.engine->run_until([&] { return server.idle.load() == 1; }, Clock::now() + kLong));
  std::atomic<bool> done{false};
  idle.engine->release_thread();
  std::thread idling([&] {
    idle.engine->run_until([&] { return done.load(); }, Clock::now() + std::chrono::seconds(120));
    idle.engine->release_thread();
  });
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
  done = true;
  idling.join();
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

}  // namespace
}  // namespace sluice
