// The LinkControl component (lib/am/link_control.h) against a rogue peer that speaks the
// handshake, heartbeats and goodbye by hand: HELLO both ways and what makes a HELLO fail or
// not count, the handshake's deadline, silence, PING/PONG, the orderly close after BYE,
// REJECT, and a peer that restarts with a new incarnation.
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sluice/testing.h>

#include "am/engine_access.h"
#include "unit/am/rogue.h"

namespace sluice::detail {
namespace {

using rogue::ProtocolTest;
using rogue::Received;
using ::testing::HasSubstr;

class LinkControlTest : public ProtocolTest {
 protected:
  void SetUp() override {
    for (const auto& [name, value] : env_) setenv(name, value, 1);
    ProtocolTest::SetUp();
    for (const auto& [name, value] : env_) unsetenv(name);
  }
  // The control messages of `kind` the engine sent the rogue.
  std::vector<Received> ctrl(std::uint16_t kind) {
    std::vector<Received> out;
    for (const auto& r : rogue_.received())
      if ((r.header.flags & wire::kFlagCtrl) && r.header.handler == kind) out.push_back(r);
    return out;
  }
  // Pumps until the peer is dead (what stderr said meanwhile in `log`).
  bool until_dead(std::string* log = nullptr) {
    if (log) ::testing::internal::CaptureStderr();
    bool dead = pump([&] { return !engine_->peer(1)->alive(); });
    if (log) *log = ::testing::internal::GetCapturedStderr();
    return dead;
  }
  std::string reason(std::size_t i) {
    return done_.size() > i && !done_[i].empty() ? std::string(done_[i][0].message()) : "(not completed)";
  }
  std::vector<std::pair<const char*, const char*>> env_{{"SLUICE_CREDITS", "16"}, {"SLUICE_RPC_WINDOW", "3"}};
};

TEST_F(LinkControlTest, TheHandshakeCarriesTheGrantAndDataWaitsForIt) {
  wire::Hello h = expect_hello();
  EXPECT_EQ(h.rank, 0u);
  EXPECT_EQ(h.credits, 16u) << "SLUICE_CREDITS";
  EXPECT_EQ(h.rpc_window, 3u) << "SLUICE_RPC_WINDOW";
  EXPECT_EQ(h.reply_index, 1u) << "the index we put in tags to the engine";
  EXPECT_NE(h.incarnation, 0u);
  EXPECT_NE(h.rx_key, 0u);
  settle();
  EXPECT_TRUE(data().empty()) << "message 1 waits for the rogue's HELLO";
  rogue_.hello(4);
  ASSERT_TRUE(pump([&] { return data().size() == 1; }));
  EXPECT_EQ(data()[0].header.seq, 1u);
  rogue_.data(1, 5, 42);
  ASSERT_TRUE(pump([&] { return delivered_.size() == 1; }));
  EXPECT_EQ(delivered_[0], 42u);
  EXPECT_TRUE(engine_->peer(1)->alive());
}

TEST_F(LinkControlTest, AHelloGrantingFewerThanTwoCreditsFailsThePeer) {
  expect_hello();
  ASSERT_EQ(send(2, 0), Result::kOk);  // waits for the handshake
  rogue_.hello(1);
  std::string log;
  ASSERT_TRUE(until_dead(&log));
  EXPECT_THAT(log, HasSubstr("failed (RESOURCE_EXHAUSTED)"));
  EXPECT_THAT(reason(0), HasSubstr("fewer than the minimum of 2"));
  EXPECT_TRUE(data().empty());
}

TEST_F(LinkControlTest, AMalformedHelloIsCountedAndIgnored) {
  expect_hello();
  rogue_.hello(4, 77, wire::kVersion, 4, /*rank=*/3);  // rank 3's HELLO from rank 1
  ASSERT_TRUE(pump([&] { return stat("wire.parse_errors") == 1; }));
  settle();
  EXPECT_TRUE(engine_->peer(1)->alive());
  EXPECT_TRUE(data().empty()) << "still waiting for a HELLO";
  rogue_.hello(4);
  ASSERT_TRUE(pump([&] { return data().size() == 1; })) << "a good HELLO after it completes the handshake";
}

TEST_F(LinkControlTest, APingIsAnsweredWithAPongCountingTheCreditsReturned) {
  ready(4);
  rogue_.data(1, 5, 1);
  rogue_.data(2, 5, 2);
  ASSERT_TRUE(pump([&] { return delivered_.size() == 2; }));
  rogue_.heartbeats().clear();
  rogue_.ctrl(wire::kPing);
  // (The engine's own PINGs, on its heartbeat timer, may come too.)
  auto pong = [&]() -> const Received* {
    for (const auto& r : rogue_.heartbeats())
      if (r.header.handler == wire::kPong) return &r;
    return nullptr;
  };
  ASSERT_TRUE(pump([&] { return pong() != nullptr; }));
  EXPECT_EQ(pong()->header.aux, 2u) << "the two released messages' credits, returned in all";
}

TEST_F(LinkControlTest, ByeIsAnsweredAndClosesOnlyOnceEverythingBeforeItIsIn) {
  ready(8);
  rogue_.data(1, 5, 1);
  rogue_.data(2, 5, 2);
  ASSERT_TRUE(pump([&] { return delivered_.size() == 2; }));
  rogue_.ctrl(wire::kBye, /*aux=*/3);  // message 3 is still to come
  ASSERT_TRUE(pump([&] { return !ctrl(wire::kBye).empty(); }));
  EXPECT_EQ(ctrl(wire::kBye)[0].header.aux, 1u) << "the engine's BYE names the last it sent";
  settle();
  EXPECT_TRUE(engine_->peer(1)->alive()) << "the close waits for message 3";
  rogue_.data(3, 5, 3);
  ASSERT_TRUE(until_dead());
  EXPECT_EQ(delivered_, (std::vector<std::uint32_t>{1, 2, 3}));
  EXPECT_EQ(stat("peers.failed"), 0u) << "an orderly close";
}

TEST_F(LinkControlTest, AByeBeyondTheCreditsIsAParseErrorAndClosesAtOnce) {
  ready(8);
  rogue_.ctrl(wire::kBye, /*aux=*/17);  // 16 granted, none delivered
  ASSERT_TRUE(until_dead());
  EXPECT_EQ(stat("wire.parse_errors"), 1u);
  EXPECT_FALSE(ctrl(wire::kBye).empty());
}

TEST_F(LinkControlTest, ARejectFailsThePeerWithItsReason) {
  expect_hello();
  ASSERT_EQ(send(2, 0), Result::kOk);
  std::string why = "no room for you";
  rogue_.ctrl(wire::kReject, 0, std::as_bytes(std::span(why)));
  ASSERT_TRUE(until_dead());
  ASSERT_EQ(done_[0].size(), 1u);
  EXPECT_EQ(done_[0][0].code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(reason(0), HasSubstr("refused by the peer: no room for you"));
}

TEST_F(LinkControlTest, AHelloWithANewIncarnationRestartsThePeer) {
  ready(2);
  ASSERT_EQ(send(2), Result::kOk);     // the last credit
  ASSERT_EQ(send(3, 0), Result::kOk);  // queued
  ASSERT_TRUE(pump([&] { return data().size() == 2; }));
  rogue_.received().clear();
  rogue_.hello(2, 78);  // restarted
  ASSERT_TRUE(pump([&] { return !ctrl(wire::kHello).empty() && !done_[0].empty(); }));
  EXPECT_THAT(reason(0), HasSubstr("peer restarted")) << "the old incarnation's send";
  wire::Hello again{};
  ASSERT_EQ(wire::decode_hello(ctrl(wire::kHello)[0].body, &again), wire::Parse::kOk);
  rogue_.set_key(again.rx_key);
  EXPECT_TRUE(engine_->peer(1)->alive());
  ASSERT_EQ(send(4), Result::kOk);
  ASSERT_TRUE(pump([&] { return data().size() == 1; }));
  EXPECT_EQ(data()[0].header.seq, 1u) << "sequences start over";
  rogue_.data(1, 5, 7);
  ASSERT_TRUE(pump([&] { return delivered_.size() == 1; }));
}

// The timers: a short handshake deadline, heartbeat and peer timeout.
class LinkTimersTest : public LinkControlTest {
 protected:
  LinkTimersTest() {
    env_.push_back({"SLUICE_CONNECT_TIMEOUT", "500ms"});
    env_.push_back({"SLUICE_HEARTBEAT", "50ms"});
    env_.push_back({"SLUICE_PEER_TIMEOUT", "400ms"});
  }
};

TEST_F(LinkTimersTest, NoHelloWithinTheConnectTimeoutFailsThePeer) {
  expect_hello();
  ASSERT_EQ(send(2, 0), Result::kOk);
  std::string log;
  ASSERT_TRUE(until_dead(&log));
  EXPECT_THAT(log, HasSubstr("failed (DEADLINE_EXCEEDED)"));
  EXPECT_THAT(reason(0), HasSubstr("no handshake within SLUICE_CONNECT_TIMEOUT=500ms"));
}

TEST_F(LinkTimersTest, APeerSilentBeyondThePeerTimeoutFails) {
  ready(2);
  ASSERT_EQ(send(2), Result::kOk);
  ASSERT_EQ(send(3, 0), Result::kOk);  // queued: it learns why the peer failed
  // Talking keeps it alive for twice the timeout...
  for (int i = 0; i < 16; ++i) {
    rogue_.ctrl(wire::kPing);
    pump_for([] { return false; }, std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(engine_->peer(1)->alive());
  // ...and silence ends it, however the engine's heartbeats try.
  rogue_.heartbeats().clear();
  ASSERT_TRUE(until_dead());
  EXPECT_THAT(reason(0), HasSubstr("silent for"));
  EXPECT_THAT(reason(0), HasSubstr("SLUICE_PEER_TIMEOUT=400ms"));
  bool pinged = false;
  for (const auto& r : rogue_.heartbeats()) pinged = pinged || r.header.handler == wire::kPing;
  EXPECT_TRUE(pinged);
}

TEST_F(LinkTimersTest, AQuietPeerSleepsBetweenItsHeartbeatsATimeItsMessagesWakeIt) {
  std::vector<std::size_t> watched_in_handler;
  ASSERT_TRUE(engine_
                  ->register_handler(
                      6, [&](Message&) { watched_in_handler.push_back(sluice::testing::watched_peers(*engine_)); })
                  .ok());
  ready(4);
  // Nothing owed, held or queued: no tick visits it; it sleeps until its heartbeat.
  ASSERT_TRUE(pump([&] { return sluice::testing::watched_peers(*engine_) == 0; }));
  rogue_.data(1, 6, 7);
  ASSERT_TRUE(pump([&] { return watched_in_handler.size() == 1; }));
  EXPECT_EQ(watched_in_handler[0], 1u) << "its message woke its timers";
  ASSERT_TRUE(pump([&] { return sluice::testing::watched_peers(*engine_) == 0; })) << "asleep again";
  // Asleep, it is still pinged at each heartbeat, and its silence still ends it.
  rogue_.heartbeats().clear();
  std::string log;
  ASSERT_TRUE(until_dead(&log));
  std::size_t pings = 0;
  for (const auto& r : rogue_.heartbeats()) pings += r.header.handler == wire::kPing ? 1 : 0;
  EXPECT_GE(pings, 2u) << "a 400 ms silence at a 50 ms heartbeat";
  EXPECT_THAT(log, HasSubstr("SLUICE_PEER_TIMEOUT=400ms"));
  EXPECT_EQ(sluice::testing::watched_peers(*engine_), 0u) << "a dead peer is forgotten";
}

// More peers than SLUICE_HEARTBEAT_RATE allows at SLUICE_HEARTBEAT: each is pinged less often,
// the engine's heartbeats per second staying at the rate (here 2 peers at 5 a second: 400 ms
// apart, which is also a third of the timeout, instead of 50 ms).
class HeartbeatRateTest : public LinkControlTest {
 protected:
  HeartbeatRateTest() {
    env_.push_back({"SLUICE_HEARTBEAT", "50ms"});
    env_.push_back({"SLUICE_HEARTBEAT_RATE", "5"});
    env_.push_back({"SLUICE_PEER_TIMEOUT", "1200ms"});
  }
};

TEST_F(HeartbeatRateTest, ASilentPeerIsPingedAtTheRateNotAtEachHeartbeat) {
  ready(2);
  rogue_.heartbeats().clear();
  Clock::time_point start = Clock::now();
  std::string log;
  ASSERT_TRUE(until_dead(&log));
  auto lived = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  std::size_t pings = 0;
  for (const auto& r : rogue_.heartbeats()) pings += r.header.handler == wire::kPing ? 1 : 0;
  std::printf("silent for %lld ms: pinged %zu times\n", static_cast<long long>(lived.count()), pings);
  EXPECT_THAT(log, HasSubstr("SLUICE_PEER_TIMEOUT=1200ms"));
  EXPECT_GE(pings, 2u) << "pinged before its silence ended it";
  EXPECT_LE(pings, 4u) << "about 400 ms apart, not 50 ms (24 pings)";
}

// The rate counts live peers only: a server that saw many clients go pings the ones it has
// as often as their number allows (here 2 peers at 40 a second: every 50 ms heartbeat, where 22
// records would stretch it to 400 ms, a third of the timeout).
class HeartbeatAfterGoneClientsTest : public LinkControlTest {
 protected:
  HeartbeatAfterGoneClientsTest() {
    env_.push_back({"SLUICE_HEARTBEAT", "50ms"});
    env_.push_back({"SLUICE_HEARTBEAT_RATE", "40"});
    env_.push_back({"SLUICE_PEER_TIMEOUT", "1200ms"});
  }
};

TEST_F(HeartbeatAfterGoneClientsTest, GoneClientsDoNotStretchTheLivePeersHeartbeat) {
  PeerTable& table = EngineAccess::core(*engine_).peers();
  std::vector<PeerData*> clients;
  clients.reserve(20);
  for (int i = 0; i < 20; ++i) clients.push_back(&table.add_client());
  for (PeerData* p : clients) table.abandon(*p, "its connect failed");
  EXPECT_EQ(table.size(), 22u);
  EXPECT_EQ(table.live(), 2u);
  ready(2);
  rogue_.heartbeats().clear();
  ASSERT_TRUE(until_dead());
  std::size_t pings = 0;
  for (const auto& r : rogue_.heartbeats()) pings += r.header.handler == wire::kPing ? 1 : 0;
  std::printf("pinged %zu times in a 1200 ms silence\n", pings);
  EXPECT_GE(pings, 8u) << "about 50 ms apart, not 400 ms (at most 3 pings)";
}

}  // namespace
}  // namespace sluice::detail
