// The Receives component (lib/am/receives.h) and the receive path (lib/am/delivery.cpp) against
// a rogue peer that sends by hand over the fake transport: data is taken only under the key
// our HELLO gave, a restarted peer gets a fresh key and its old incarnation's stragglers are
// dropped, messages reach the handler in sequence order with copies counted, credits go back
// as Messages are released (piggybacked or in a CREDIT), a coalesced batch beyond the grant is
// cut, and a peer's posted receives start at SLUICE_RX_POSTED and grow, up to its credits and
// those, when its messages arrive before a receive does.
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "transport/fake.h"
#include "unit/am/rogue.h"

namespace sluice::detail {
namespace {

using fake::Action;
using fake::Fabric;
using fake::Packet;
using rogue::ProtocolTest;
using rogue::Received;

class ReceivesTest : public ProtocolTest {
 protected:
  void SetUp() override {
    Fabric::reset();
    for (const auto& [name, value] : env_) setenv(name, value, 1);
    ProtocolTest::SetUp();
    for (const auto& [name, value] : env_) unsetenv(name);
  }
  void TearDown() override {
    ProtocolTest::TearDown();
    Fabric::reset();
  }
  // The receive key in the last HELLO the engine sent the rogue (0: none).
  std::uint64_t hello_key() {
    wire::Hello h{};
    for (const auto& r : rogue_.received()) {
      if ((r.header.flags & wire::kFlagCtrl) && r.header.handler == wire::kHello) {
        EXPECT_EQ(wire::decode_hello(r.body, &h), wire::Parse::kOk);
      }
    }
    return h.rx_key;
  }
  // The receive pool's eager class: its slots in use and reserved.
  PoolClassStats eager() { return engine_->pool_stats(Direction::kRecv).classes[0]; }
  // One progress call of the engine alone; how many messages its handler got in it.
  std::size_t one_progress() {
    std::size_t before = delivered_.size();
    engine_->progress();
    return delivered_.size() - before;
  }
  // After the handshake (8 credits each way), `posted` receives are posted, each holding a
  // slot, and the reservation is the credits' and theirs; then the rogue sends 6 messages.
  void six_with_posted(std::uint32_t posted) {
    ready(8);
    settle();
    PoolClassStats c = eager();
    EXPECT_EQ(c.reserved, 8u + posted) << "8 credits' slots and the posted receives'";
    EXPECT_EQ(c.slots_total - c.slots_free, posted) << "each posted receive holds its slot";
    for (std::uint32_t s = 1; s <= 6; ++s) rogue_.data(s, 5, s);
  }
  static std::vector<std::uint32_t> upto(std::uint32_t n) {
    std::vector<std::uint32_t> v(n);
    std::iota(v.begin(), v.end(), 1u);
    return v;
  }
  // Credits the engine returned in CREDIT messages, and how many such messages.
  std::pair<std::uint32_t, std::size_t> credit_msgs() {
    std::pair<std::uint32_t, std::size_t> out{0, 0};
    for (const auto& r : rogue_.received()) {
      if ((r.header.flags & wire::kFlagCtrl) && r.header.handler == wire::kCredit) {
        out.first += r.header.credits;
        ++out.second;
      }
    }
    return out;
  }
  // No engine PING within a test (one would carry owed credits).
  std::vector<std::pair<const char*, const char*>> env_{{"SLUICE_CREDITS", "8"}, {"SLUICE_HEARTBEAT", "5s"}};
};

TEST_F(ReceivesTest, DataIsTakenOnlyUnderTheKeyTheHelloGave) {
  std::uint64_t key = expect_hello().rx_key;
  ASSERT_NE(key, 0u);
  rogue_.hello(8);
  ASSERT_TRUE(pump([&] { return data().size() == 1; }));
  // Wrong keys (a neighbour's, and the "closed" key 0): no posted receive matches them.
  rogue_.set_key(key + 1);
  rogue_.data(1, 5, 111);
  rogue_.set_key(0);
  rogue_.data(2, 5, 222);
  settle();
  EXPECT_TRUE(delivered_.empty()) << "data under a key the engine never gave is not taken";
  EXPECT_EQ(stat("wire.parse_errors"), 0u);
  EXPECT_EQ(stat("am.duplicates_dropped"), 0u);
  // Under the HELLO's key: taken, and the wrong-key messages' sequences were never used.
  rogue_.set_key(key);
  for (std::uint32_t s = 1; s <= 20; ++s) rogue_.data(s, 5, s);  // more than the posted receives
  ASSERT_TRUE(pump([&] { return delivered_.size() >= 20; }));
  settle();
  EXPECT_EQ(delivered_, upto(20));
  EXPECT_EQ(stat("am.duplicates_dropped"), 0u) << "the wrong-key 1 and 2 never reached the window";
}

TEST_F(ReceivesTest, ARestartedPeerGetsAFreshKeyAndItsOldIncarnationsStragglersAreDropped) {
  std::uint64_t old_key = expect_hello().rx_key;
  rogue_.hello(8, 77);
  rogue_.data(1, 5, 1);
  ASSERT_TRUE(pump([&] { return delivered_.size() == 1; }));
  // The old incarnation's sequence 2, still in flight (held by the fabric) when it restarts.
  Fabric::on_send([&](const Packet& p) { return p.tag == rogue_.eager_tag(); }, Action::kHold);
  rogue_.data(2, 5, 999);
  ASSERT_EQ(Fabric::held(), 1u);
  rogue_.received().clear();
  rogue_.hello(8, 78);
  ASSERT_TRUE(pump([&] { return hello_key() != 0; }));
  std::uint64_t new_key = hello_key();
  EXPECT_NE(new_key, old_key) << "the new incarnation's receives are posted under a fresh key";
  EXPECT_NE(new_key, 0u);
  std::uint64_t dropped = stat("am.dropped");
  ASSERT_EQ(Fabric::release_held(), 1u);
  ASSERT_TRUE(pump([&] { return stat("am.dropped") == dropped + 1; })) << "the straggler is purged and counted";
  rogue_.set_key(new_key);
  rogue_.data(1, 5, 101);
  rogue_.data(2, 5, 102);
  ASSERT_TRUE(pump([&] { return delivered_.size() >= 3; }));
  settle();
  EXPECT_EQ(delivered_, (std::vector<std::uint32_t>{1, 101, 102})) << "999 never delivered as the new one's 2";
  EXPECT_EQ(stat("am.dropped"), dropped + 1);
}

TEST_F(ReceivesTest, MessagesReachTheHandlerInSequenceOrderAndCopiesAreCounted) {
  ready(8);
  rogue_.data(3, 5, 3);
  settle();
  EXPECT_TRUE(delivered_.empty()) << "3 waits in the window for 1 and 2";
  rogue_.data(3, 5, 333);  // a copy of the one waiting
  ASSERT_TRUE(pump([&] { return stat("am.duplicates_dropped") == 1; }));
  rogue_.data(1, 5, 1);
  ASSERT_TRUE(pump([&] { return !delivered_.empty(); }));
  settle();
  EXPECT_EQ(delivered_, (std::vector<std::uint32_t>{1})) << "3 still waits for 2";
  rogue_.data(2, 5, 2);
  ASSERT_TRUE(pump([&] { return delivered_.size() >= 3; }));
  EXPECT_EQ(delivered_, (std::vector<std::uint32_t>{1, 2, 3}));
  rogue_.data(2, 5, 222);  // a copy of one delivered
  ASSERT_TRUE(pump([&] { return stat("am.duplicates_dropped") == 2; }));
  // Further ahead than a correct sender can be (its grant + 64): refused like a copy.
  rogue_.data(4 + 8 + 65, 5, 777);
  ASSERT_TRUE(pump([&] { return stat("am.duplicates_dropped") == 3; }));
  rogue_.data(4, 5, 4);
  ASSERT_TRUE(pump([&] { return delivered_.size() >= 4; }));
  settle();
  EXPECT_EQ(delivered_, upto(4));
  EXPECT_EQ(stat("am.duplicates_dropped"), 3u);
  EXPECT_EQ(stat("wire.parse_errors"), 0u);
  EXPECT_TRUE(engine_->peer(1)->alive());
}

TEST_F(ReceivesTest, CreditsGoBackAsMessagesAreReleasedPiggybackedOrInACredit) {
  ready(8);
  keep_ = true;
  auto keep = [&](std::uint32_t from, std::uint32_t to) {
    for (std::uint32_t s = from; s <= to; ++s) rogue_.data(s, 5, s);
    ASSERT_TRUE(pump([&] { return delivered_.size() == to; }));
    settle();
  };
  keep(1, 3);
  EXPECT_EQ(rogue_.credits_returned(), 0u) << "kept Messages owe nothing yet";
  // Released, then a message to the rogue at once: the 3 ride on it.
  kept_.clear();
  ASSERT_EQ(send(2), Result::kOk);
  ASSERT_TRUE(pump([&] { return data().size() == 2; }));
  EXPECT_EQ(data()[1].header.credits, 3u) << "piggybacked on the engine's next message";
  settle();
  EXPECT_EQ(credit_msgs().second, 0u);
  // Under half the grant owed and nothing to ride on: a CREDIT on the next timer tick, not at
  // the release.
  keep(4, 5);
  kept_.clear();
  for (int i = 0; i < 100; ++i) rogue_.progress();
  EXPECT_EQ(rogue_.credits_returned(), 3u);
  ASSERT_TRUE(pump([&] { return rogue_.credits_returned() >= 5; }));
  EXPECT_EQ(credit_msgs(), (std::pair<std::uint32_t, std::size_t>{2, 1}));
  // Half the grant owed: a CREDIT leaves from the release itself.
  keep(6, 9);
  EXPECT_EQ(rogue_.credits_returned(), 5u);
  kept_.clear();
  for (int i = 0; i < 100; ++i) rogue_.progress();
  EXPECT_EQ(rogue_.credits_returned(), 9u) << "every released message's credit, once";
  settle();
  EXPECT_EQ(rogue_.credits_returned(), 9u);
  EXPECT_EQ(credit_msgs(), (std::pair<std::uint32_t, std::size_t>{6, 2}));
}

TEST_F(ReceivesTest, ACoalescedBatchBeyondTheGrantIsCutAndCounted) {
  ready(8);
  keep_ = true;  // nothing released: the grant of 8 is all the rogue may have out
  rogue_.coalesced(1, 12);
  ASSERT_TRUE(pump([&] { return stat("wire.parse_errors") >= 1; }));
  settle();
  std::vector<std::uint32_t> want;
  for (std::uint32_t s = 1; s <= 8; ++s) want.push_back(s * 10);
  EXPECT_EQ(delivered_, want) << "the grant's 8, the rest of the batch dropped";
  EXPECT_EQ(stat("wire.parse_errors"), 1u);
  kept_.clear();
  ASSERT_TRUE(pump([&] { return rogue_.credits_returned() == 8; }));
  rogue_.coalesced(9, 8);  // within the credits returned: all taken
  ASSERT_TRUE(pump([&] { return delivered_.size() >= 16; }));
  settle();
  for (std::uint32_t s = 9; s <= 16; ++s) want.push_back(s * 10);
  EXPECT_EQ(delivered_, want);
  EXPECT_EQ(stat("wire.parse_errors"), 1u);
  EXPECT_TRUE(engine_->peer(1)->alive());
}

TEST_F(ReceivesTest, EveryPostedReceiveTakesAMessageInOneProgressCall) {
  six_with_posted(8);  // min(SLUICE_RX_POSTED=8, 8 credits)
  EXPECT_EQ(one_progress(), 6u);
}

class RxPostedTest : public ReceivesTest {
 protected:
  RxPostedTest() { env_.push_back({"SLUICE_RX_POSTED", "2"}); }
};

TEST_F(RxPostedTest, TwoReceivesArePostedAtFirstAndOneMoreForEachMessageFoundWaiting) {
  six_with_posted(2);
  EXPECT_EQ(one_progress(), 2u) << "two posted receives take two; four wait in UCX";
  EXPECT_EQ(stat("am.receives_grown"), 0u);
  // Re-posted at the next call's start, each finds a message waiting, and brings one more.
  EXPECT_EQ(one_progress(), 4u);
  EXPECT_EQ(stat("am.receives_grown"), 4u);
  EXPECT_EQ(delivered_, upto(6));
  PoolClassStats c = eager();
  EXPECT_EQ(c.slots_total - c.slots_free, 6u) << "six receives posted, each holding its slot";
  EXPECT_EQ(c.reserved, 10u) << "within the reservation: 8 credits + 2";
  // A burst as large as the last one now lands in posted receives, in one call.
  for (std::uint32_t s = 7; s <= 12; ++s) rogue_.data(s, 5, s);
  EXPECT_EQ(one_progress(), 6u);
  EXPECT_EQ(stat("am.receives_grown"), 4u) << "none found waiting";
  EXPECT_EQ(delivered_, upto(12));
}

TEST_F(RxPostedTest, ReceivesGrownForAGrantThatShrinksAreCancelledAndTheirSlotsGoBack) {
  six_with_posted(2);
  EXPECT_EQ(one_progress(), 2u);
  EXPECT_EQ(one_progress(), 4u);
  settle();  // the six credits owed go back to the rogue (a CREDIT)
  ASSERT_EQ(eager().slots_total - eager().slots_free, 6u);
  rogue_.grant(8, 8, 6);  // 6 of its 8 credits given back: 2 + 2 receives from now on
  ASSERT_TRUE(pump([&] { return stat("flow.credits_granted") == 2; }));
  settle();
  PoolClassStats c = eager();
  EXPECT_EQ(c.reserved, 4u);
  EXPECT_EQ(c.slots_total - c.slots_free, 4u) << "the two grown beyond it cancelled, their slots back";
  rogue_.data(7, 5, 7);
  rogue_.data(8, 5, 8);
  ASSERT_TRUE(pump([&] { return delivered_.size() == 8; }));
  EXPECT_EQ(delivered_, upto(8));
  EXPECT_TRUE(engine_->peer(1)->alive());
}

TEST_F(RxPostedTest, PostedReceivesGrowNoFurtherThanTheCreditsAndTheTwo) {
  ready(8);
  settle();
  // 16 messages from a rogue with 8 credits, none kept: receives grow to 10 and no further.
  for (std::uint32_t s = 1; s <= 16; ++s) rogue_.data(s, 5, s);
  ASSERT_TRUE(pump([&] { return delivered_.size() >= 16; }));
  settle();
  EXPECT_EQ(delivered_, upto(16));
  EXPECT_EQ(stat("am.receives_grown"), 8u) << "from 2 to 8 + 2";
  PoolClassStats c = eager();
  EXPECT_EQ(c.slots_total - c.slots_free, 10u);
  EXPECT_EQ(c.reserved, 10u);
  EXPECT_TRUE(engine_->peer(1)->alive());
}

TEST_F(RxPostedTest, KeptMessagesAndPostedReceivesNeverHoldMoreThanTheReservation) {
  ready(8);
  keep_ = true;
  // 12 messages from a rogue with 8 credits: kept ones keep their slots, so the receives are
  // re-posted from the reservation (credits + RX_POSTED) until it is all held.
  for (std::uint32_t s = 1; s <= 12; ++s) rogue_.data(s, 5, s);
  ASSERT_TRUE(pump([&] { return delivered_.size() >= 10; }));
  settle();
  EXPECT_EQ(delivered_.size(), 10u) << "8 credits + 2 posted receives in the engine's hands; 2 wait in UCX";
  PoolClassStats c = eager();
  EXPECT_EQ(c.slots_total - c.slots_free, c.reserved);
  keep_ = false;
  kept_.clear();
  ASSERT_TRUE(pump([&] { return delivered_.size() >= 12; }));
  settle();
  EXPECT_EQ(delivered_, upto(12));
  EXPECT_TRUE(engine_->peer(1)->alive());
}

}  // namespace
}  // namespace sluice::detail
