// The engine's protocol state machines driven with crafted input: a "rogue" rank 1 speaks the
// wire protocol by hand over real UCX, byte by byte, to a real engine at rank 0.
#include <cstring>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flow/flow.h"
#include "unit/am/rogue.h"

namespace sluice::detail {
namespace {

using rogue::ProtocolTest;
using rogue::Received;
using rogue::Rogue;
using Bytes = std::vector<std::byte>;

TEST_F(ProtocolTest, HelloCarriesTheGrantAndDataWaitsForThePeersHello) {
  wire::Hello h = expect_hello();
  EXPECT_EQ(h.rank, 0u);
  EXPECT_EQ(h.credits, 32u);
  EXPECT_EQ(h.eager_max, 8192u);
  EXPECT_NE(h.incarnation, 0u);
  // No data before our hello.
  settle();
  EXPECT_TRUE(rogue_.received().empty());
  // Hello and the first data message back to back (coalesced in one progress round).
  rogue_.hello(4);
  rogue_.data(1, 5, 100);
  ASSERT_TRUE(pump([&] { return !delivered_.empty() && !rogue_.received().empty(); }));
  EXPECT_EQ(delivered_, std::vector<std::uint32_t>{100});
  EXPECT_EQ(rogue_.received().front().header.seq, 1u);
  EXPECT_EQ(rogue_.received().front().header.ack, 0u) << "ack = 1 only once the engine delivered it";
}

TEST_F(ProtocolTest, DataBeforeTheHelloIsDroppedAndCounted) {
  expect_hello();
  rogue_.data(1, 5, 1);  // split: data first
  pump([&] { return stat("am.dropped") == 1; });
  EXPECT_EQ(stat("am.dropped"), 1u);
  EXPECT_TRUE(delivered_.empty());
}

TEST_F(ProtocolTest, DataThatOvertakesItsSendersHelloIsDeliveredAfterIt) {
  // Our HELLO goes on the CTRL class, which the engine takes only by probing; our data goes on
  // its EAGER tag, which a posted receive takes at once. Sent back to back, the data is taken
  // first: the engine must then fetch the HELLO before judging the data, not drop it.
  expect_hello();
  rogue_.hello(4);
  rogue_.data(1, 5, 7);
  ASSERT_TRUE(pump([&] { return !delivered_.empty(); }));
  EXPECT_EQ(delivered_, std::vector<std::uint32_t>{7});
  EXPECT_EQ(stat("am.dropped"), 0u);
}

TEST_F(ProtocolTest, ControlMessagesToAReadyPeerRideItsEagerTag) {
  // Before our HELLO the engine has no key of ours: its HELLO is CTRL class. Afterwards its
  // control messages go on our EAGER tag (our key), in order with its data.
  expect_hello();
  rogue_.hello(4);
  for (std::uint32_t s = 1; s <= 4; ++s) rogue_.data(s, 5, s);  // half the grant owed: a CREDIT
  ASSERT_TRUE(pump([&] {
    for (const auto& r : rogue_.received())
      if (r.header.handler == wire::kCredit && (r.header.flags & wire::kFlagCtrl)) return true;
    return false;
  }));
  for (const auto& r : rogue_.received()) {
    if (!(r.header.flags & wire::kFlagCtrl)) continue;
    // Slot 0: the engine's index at our end (its rank).
    EXPECT_EQ(r.tag, wire::make_tag(wire::kEager, 0, Rogue::kKey)) << "control kind " << r.header.handler;
  }
}

TEST_F(ProtocolTest, AfterARestartMessagesOnTheOldKeyAreDroppedNotDelivered) {
  // A restarted peer gets a fresh key. What its previous incarnation sent under the old key
  // (late, or sitting in UCX) is taken out and dropped: never delivered as the new one's.
  std::uint64_t old_key = expect_hello().rx_key;
  rogue_.hello(8, 77);
  rogue_.data(1, 5, 1);
  ASSERT_TRUE(pump([&] { return delivered_.size() == 1; }));
  rogue_.received().clear();
  rogue_.hello(8, 78);  // restarted
  ASSERT_TRUE(pump([&] {
    for (const auto& r : rogue_.received())
      if (r.header.handler == wire::kHello && (r.header.flags & wire::kFlagCtrl)) return true;
    return false;
  }));
  wire::Hello again{};
  for (const auto& r : rogue_.received()) {
    if (r.header.handler == wire::kHello) {
      ASSERT_EQ(wire::decode_hello(r.body, &again), wire::Parse::kOk);
    }
  }
  EXPECT_NE(again.rx_key, old_key);
  std::uint64_t dropped = stat("am.dropped");
  rogue_.set_key(old_key);
  rogue_.data(1, 5, 999);  // the old incarnation's sequence 1
  ASSERT_TRUE(pump([&] { return stat("am.dropped") == dropped + 1; })) << "taken out of UCX and counted";
  // The new incarnation's receives work as before the restart: each op posted once (the
  // restart cancels them and re-opens them in the same progress call), every message
  // delivered intact and in order, and no receive slot held beyond the posted receives.
  rogue_.set_key(again.rx_key);
  std::vector<std::uint32_t> want{1};
  for (std::uint32_t s = 1; s <= 8; ++s) {
    rogue_.data(s, 5, 100 + s);
    want.push_back(100 + s);
  }
  ASSERT_TRUE(pump([&] { return delivered_.size() == want.size(); }));
  EXPECT_EQ(delivered_, want);
  for (std::uint32_t s = 9; s <= 16; ++s) {
    rogue_.data(s, 5, 100 + s);
    want.push_back(100 + s);
  }
  ASSERT_TRUE(pump([&] { return delivered_.size() == want.size(); }));
  EXPECT_EQ(delivered_, want);
  auto rx = engine_->pool_stats(Direction::kRecv).classes[0];
  EXPECT_LE(rx.slots_total - rx.slots_free, ctx_->config().rx_posted) << "only the posted receives hold slots";
}

TEST_F(ProtocolTest, VersionMismatchEndsTheConnectionOnBothSides) {
  expect_hello();
  rogue_.hello(4, 77, wire::kVersion + 1);
  ASSERT_TRUE(pump([&] { return !engine_->peer(1)->alive(); }));
  std::uint32_t v = 0;
  EXPECT_EQ(engine_->peer(1)->send(5, {}, std::as_bytes(std::span(&v, 1))), Result::kUnavailable);
  // The rogue is told why.
  ASSERT_TRUE(pump([&] { return !rogue_.received().empty(); }));
  const Received& r = rogue_.received().back();
  EXPECT_EQ(r.header.handler, wire::kReject);
  std::string why(reinterpret_cast<const char*>(r.body.data()), r.body.size());
  EXPECT_THAT(why, ::testing::HasSubstr("version"));
}

TEST_F(ProtocolTest, SequencesPastCurrentFutureAreDeliveredOnceInOrder) {
  expect_hello();
  rogue_.hello(8);
  rogue_.data(1, 5, 1);
  rogue_.data(1, 5, 111);  // duplicate
  rogue_.data(3, 5, 3);    // future
  rogue_.data(2, 5, 2);
  rogue_.data(2, 5, 222);  // stale
  ASSERT_TRUE(pump([&] { return delivered_.size() >= 3 && stat("am.duplicates_dropped") >= 2; }));
  EXPECT_EQ(delivered_, (std::vector<std::uint32_t>{1, 2, 3}));
  EXPECT_EQ(stat("am.duplicates_dropped"), 2u);
}

TEST_F(ProtocolTest, CompactAndFullHeadersMixInOneOrderedStream) {
  // The compact header carries the sequence's low 32 bits; the receiver extends them against
  // the sequence it expects, so compact and full messages order as one stream, early ones
  // wait, duplicates of either form are dropped.
  expect_hello();
  rogue_.hello(8);
  rogue_.compact_data(1, 5, 1);
  rogue_.data(3, 5, 3);  // full header, early
  rogue_.compact_data(2, 5, 2);
  rogue_.compact_data(3, 5, 333);   // compact duplicate of a full one
  rogue_.data(2, 5, 222);           // full duplicate of a compact one
  rogue_.compact_data(4, 5, 4, 1);  // returns a credit too
  ASSERT_TRUE(pump([&] { return delivered_.size() >= 4 && stat("am.duplicates_dropped") >= 2; }));
  EXPECT_EQ(delivered_, (std::vector<std::uint32_t>{1, 2, 3, 4}));
  EXPECT_EQ(stat("am.duplicates_dropped"), 2u);
  EXPECT_EQ(stat("wire.parse_errors"), 0u);
}

TEST_F(ProtocolTest, ACompactMessageInsideABatchIsRefusedAndTheConnectionLives) {
  expect_hello();
  rogue_.hello(8);
  rogue_.coalesced_with_compact(1);  // 1 stands; the compact 2 is refused
  ASSERT_TRUE(pump([&] { return stat("wire.parse_errors") >= 1; }));
  settle();
  EXPECT_EQ(delivered_, (std::vector<std::uint32_t>{10}));
  EXPECT_EQ(stat("wire.parse_errors"), 1u);
  rogue_.compact_data(2, 5, 20);  // sent on its own, it is taken
  ASSERT_TRUE(pump([&] { return delivered_.size() == 2; }));
  EXPECT_EQ(delivered_, (std::vector<std::uint32_t>{10, 20}));
  EXPECT_TRUE(engine_->peer(1)->alive());
}

TEST_F(ProtocolTest, UnknownHandlerIsCountedAndTheConnectionLives) {
  expect_hello();
  rogue_.hello(8);
  rogue_.data(1, 999, 1);
  rogue_.data(2, 5, 2);
  rogue_.data(3, 4000, 3);  // beyond kMaxHandlers: no handler can ever take it
  ASSERT_TRUE(pump([&] { return delivered_.size() == 1 && stat("am.unknown_handler") == 2; }));
  EXPECT_EQ(stat("am.unclaimed"), 1u);  // 999 could still be registered; 4000 cannot
  EXPECT_TRUE(engine_->peer(1)->alive());
}

TEST_F(ProtocolTest, MessagesForAHandlerNotYetRegisteredWaitForItAndArriveInOrder) {
  expect_hello();
  rogue_.hello(8);
  std::vector<std::uint32_t> got;
  rogue_.data(1, 7, 1);
  rogue_.data(2, 5, 2);
  rogue_.data(3, 7, 3);
  ASSERT_TRUE(pump([&] { return delivered_.size() == 1 && stat("am.unclaimed") == 2; }));
  settle();
  EXPECT_EQ(stat("am.unclaimed"), 2u);  // still waiting; nothing dropped
  ASSERT_TRUE(engine_
                  ->register_handler(7,
                                     [&](Message& m) {
                                       std::uint32_t v;
                                       std::memcpy(&v, m.payload().data(), sizeof(v));
                                       got.push_back(v);
                                     })
                  .ok());
  EXPECT_TRUE(got.empty());  // handlers run from progress(), not from register_handler()
  rogue_.data(4, 7, 4);      // arrives after the registration: after the kept ones
  ASSERT_TRUE(pump([&] { return got.size() == 3; }));
  EXPECT_EQ(got, (std::vector<std::uint32_t>{1, 3, 4}));
  EXPECT_EQ(stat("am.unclaimed"), 0u);
  // Their credits came back: the sender may go on.
  EXPECT_TRUE(engine_->peer(1)->alive());
}

TEST_F(ProtocolTest, CreditsAreNeverSpentBeyondTheGrant) {
  expect_hello();  // message 1 is queued at the engine
  rogue_.hello(4);
  for (std::uint32_t i = 2; i <= 10; ++i) {
    ASSERT_EQ(engine_->peer(1)->send(5, {}, std::as_bytes(std::span(&i, 1))), Result::kOk);
  }
  pump([&] { return rogue_.received().size() >= 4; });
  settle();
  EXPECT_EQ(rogue_.received().size(), 4u) << "4 credits, 4 messages (the hello was taken)";
  EXPECT_GT(stat("flow.credit_stalls"), 0u);
  rogue_.credit(4);
  ASSERT_TRUE(pump([&] { return rogue_.received().size() >= 8; }));
  settle();
  EXPECT_EQ(rogue_.received().size(), 8u);
  for (std::size_t i = 0; i < 8; ++i) EXPECT_EQ(rogue_.received()[i].header.seq, i + 1);
  // Returning more than was granted is a counted protocol error, not a free pass.
  rogue_.credit(100);
  pump([&] { return stat("wire.parse_errors") >= 1; });
  EXPECT_EQ(stat("wire.parse_errors"), 1u);
  settle();
  EXPECT_EQ(rogue_.received().size(), 8u);
}

TEST_F(ProtocolTest, CreditsReturnAsMessagesAreReleasedCarryingTheAck) {
  expect_hello();
  rogue_.hello(4);
  pump([&] { return !rogue_.received().empty(); });
  rogue_.received().clear();
  keep_ = true;  // the handler keeps every message: no credit may return
  for (std::uint32_t s = 1; s <= 32; ++s) rogue_.data(s, 5, s);
  ASSERT_TRUE(pump([&] { return delivered_.size() == 32; }));
  settle();
  for (const auto& r : rogue_.received()) EXPECT_NE(r.header.handler, wire::kCredit);
  kept_.clear();  // release: half the grant owed -> explicit credit messages
  ASSERT_TRUE(pump([&] {
    for (const auto& r : rogue_.received())
      if ((r.header.flags & wire::kFlagCtrl) && r.header.handler == wire::kCredit && r.header.ack == 32) return true;
    return false;
  }));
  std::uint32_t returned = 0;
  for (const auto& r : rogue_.received()) returned += r.header.credits;
  EXPECT_EQ(returned, 32u);
}

TEST_F(ProtocolTest, CoalescedMessagesAreEachDeliveredInOrder) {
  expect_hello();
  rogue_.hello(8);
  rogue_.coalesced(1, 5);
  ASSERT_TRUE(pump([&] { return delivered_.size() == 5; }));
  EXPECT_EQ(delivered_, (std::vector<std::uint32_t>{10, 20, 30, 40, 50}));
  EXPECT_EQ(stat("wire.parse_errors"), 0u);
}

TEST_F(ProtocolTest, AControlMessageInsideABatchIsRefusedAndTheConnectionLives) {
  expect_hello();
  rogue_.hello(8);
  // The last of three is a CREDIT (the wire parser already refuses one with MORE, so only the
  // last of a batch can be one): 1 and 2 stand, the CREDIT is refused.
  rogue_.coalesced(1, 3, SIZE_MAX, 2);
  ASSERT_TRUE(pump([&] { return stat("wire.parse_errors") >= 1; }));
  settle();
  EXPECT_EQ(delivered_, (std::vector<std::uint32_t>{10, 20}));
  EXPECT_EQ(stat("wire.parse_errors"), 1u);
  rogue_.coalesced(3, 2);
  ASSERT_TRUE(pump([&] { return delivered_.size() == 4; }));
  EXPECT_TRUE(engine_->peer(1)->alive());
}

TEST_F(ProtocolTest, ACorruptMessageInABatchDropsItAndTheRestButNotTheConnection) {
  expect_hello();
  rogue_.hello(8);
  rogue_.coalesced(1, 4, 2);  // the third is corrupt: 1 and 2 stand, 3 and 4 are gone
  ASSERT_TRUE(pump([&] { return stat("wire.parse_errors") >= 1; }));
  settle();
  EXPECT_EQ(delivered_, (std::vector<std::uint32_t>{10, 20}));
  EXPECT_EQ(stat("wire.parse_errors"), 1u);
  rogue_.coalesced(3, 2);  // resent: the connection goes on
  ASSERT_TRUE(pump([&] { return delivered_.size() == 4; }));
  EXPECT_EQ(delivered_, (std::vector<std::uint32_t>{10, 20, 30, 40}));
  EXPECT_TRUE(engine_->peer(1)->alive());
}

TEST_F(ProtocolTest, ABatchBeyondTheCreditsCannotTakeMoreThanTheReservation) {
  // The engine granted 32 credits; a rogue packs 100 messages into one tagged message and the
  // handler keeps every one. Receive slots never exceed what is reserved; the excess is
  // dropped and counted.
  keep_ = true;
  expect_hello();
  rogue_.hello(8);
  rogue_.coalesced(1, 100);
  ASSERT_TRUE(pump([&] { return stat("wire.parse_errors") >= 1; }));
  settle();
  PoolStats rs = engine_->pool_stats(Direction::kRecv);
  const PoolClassStats& eager = rs.classes[0];
  EXPECT_LE(eager.slots_total - eager.slots_free, eager.reserved);
  EXPECT_LT(delivered_.size(), 100u);
  EXPECT_GE(delivered_.size(), 32u);
  for (std::size_t i = 0; i < delivered_.size(); ++i) EXPECT_EQ(delivered_[i], (i + 1) * 10);
}

TEST_F(ProtocolTest, AReplyIntoABufferTheCallDidNotGiveFailsTheCallNotTheConnection) {
  // A reply flagged "into your reply buffer" for a call that gave none: its payload has nowhere
  // to land. The call fails at once with the reason (it used to wait for that payload forever),
  // the violation is counted, and the connection stays up.
  expect_hello();
  rogue_.hello(8);
  std::optional<absl::Status> result;
  std::uint32_t v = 7;
  ASSERT_EQ(
      engine_->peer(1)->call(6, {}, std::as_bytes(std::span(&v, 1)), {}, [&](absl::Status s, Message&) { result = s; }),
      Result::kOk);
  ASSERT_TRUE(pump([&] { return rogue_.received().size() >= 2; }));  // data message 1, then the call
  const Received& request = rogue_.received()[1];
  ASSERT_TRUE(request.header.flags & wire::kFlagRequest);
  wire::Header h;
  h.flags = wire::kFlagReply | wire::kFlagReplyBuf | wire::kFlagRndv;  // as a server sends it
  h.seq = 1;
  h.rpc_id = request.header.rpc_id;
  h.payload_len = 64;
  rogue_.send(h, {});
  ASSERT_TRUE(pump([&] { return result.has_value(); }));
  EXPECT_EQ(result->code(), absl::StatusCode::kInternal) << *result;
  EXPECT_EQ(stat("wire.parse_errors"), 1u);
  EXPECT_TRUE(engine_->peer(1)->alive());
}

TEST_F(ProtocolTest, AReplyEchoesTheCallIdWholeInTheHeaderThatCanCarryIt) {
  // The compact header carries 48 bits of a call id. A caller's id beyond that (no engine
  // makes one, a peer may) comes back whole in a full header; one within it, compact.
  expect_hello();
  rogue_.hello(8);
  ASSERT_TRUE(
      engine_->register_handler(6, [](Message& m) { EXPECT_EQ(m.reply_copy({}, m.payload()), Result::kOk); }).ok());
  const std::uint64_t ids[] = {(std::uint64_t{1} << 60) | 5, 0xabcdef123456ULL};
  for (std::size_t i = 0; i < 2; ++i) {
    wire::Header h;
    h.flags = wire::kFlagRequest;
    h.handler = 6;
    h.seq = i + 1;
    h.rpc_id = ids[i];
    h.payload_len = sizeof(std::uint32_t);
    auto v = static_cast<std::uint32_t>(40 + i);
    rogue_.send(h, std::as_bytes(std::span(&v, 1)));
  }
  auto replies = [&] {
    return std::count_if(rogue_.received().begin(), rogue_.received().end(),
                         [](const Received& r) { return (r.header.flags & wire::kFlagReply) != 0; });
  };
  ASSERT_TRUE(pump([&] { return replies() == 2; }));
  std::vector<const Received*> got;
  for (const Received& r : rogue_.received())
    if (r.header.flags & wire::kFlagReply) got.push_back(&r);
  EXPECT_EQ(got[0]->header.rpc_id, ids[0]);
  EXPECT_FALSE(got[0]->header.flags & wire::kFlagCompact);
  EXPECT_EQ(got[1]->header.rpc_id, ids[1]);
  EXPECT_TRUE(got[1]->header.flags & wire::kFlagCompact);
  for (std::size_t i = 0; i < 2; ++i) {
    std::uint32_t v = 0;
    ASSERT_GE(got[i]->body.size(), sizeof(v));
    std::memcpy(&v, got[i]->body.data() + got[i]->body.size() - sizeof(v), sizeof(v));
    EXPECT_EQ(v, 40 + i);
  }
  EXPECT_EQ(stat("wire.parse_errors"), 0u);
}

TEST_F(ProtocolTest, AnEngineWhoseMessagesWaitAsksForCreditsAndSpendsWhatItIsLent) {
  expect_hello();  // message 1 is queued at the engine
  rogue_.hello(4);
  for (std::uint32_t i = 2; i <= 20; ++i)
    ASSERT_EQ(engine_->peer(1)->send(5, {}, std::as_bytes(std::span(&i, 1))), Result::kOk);
  ASSERT_TRUE(pump([&] { return rogue_.received().size() >= 4 && !rogue_.grants().empty(); }));
  settle();
  EXPECT_EQ(rogue_.received().size(), 4u);
  wire::Grant ask = rogue_.last_grant();
  EXPECT_GT(ask.waiting, 0u) << "the GRANT says that its messages wait";
  EXPECT_EQ(ask.lent, 32u) << "and what it granted us, unchanged";
  EXPECT_EQ(ask.given_up, 0u);
  rogue_.grant(4 + 16, 20);  // 16 more, without returning any
  ASSERT_TRUE(pump([&] { return rogue_.received().size() >= 20; }));
  settle();
  EXPECT_EQ(rogue_.received().size(), 20u) << "all 20 within the 4 granted and the 16 lent";
  EXPECT_EQ(stat("flow.credits_held"), 20u);
  EXPECT_EQ(stat("wire.parse_errors"), 0u);
}

TEST_F(ProtocolTest, AnEngineGivesBackItsUnspentCreditsDownToTheTarget) {
  ready(32);  // message 1 spent a credit: 31 unspent
  rogue_.grant(32, 2);
  ASSERT_TRUE(pump([&] { return rogue_.last_grant().given_up == 30; }));
  EXPECT_EQ(stat("flow.credits_held"), 2u) << "the one in use and one more";
  for (std::uint32_t i = 2; i <= 4; ++i)
    ASSERT_EQ(engine_->peer(1)->send(5, {}, std::as_bytes(std::span(&i, 1))), Result::kOk);
  pump([&] { return data().size() >= 2; });
  settle();
  EXPECT_EQ(data().size(), 2u) << "one credit was left to spend";
  rogue_.credit(2);
  ASSERT_TRUE(pump([&] { return data().size() == 4; }));
}

TEST_F(ProtocolTest, GrantsNoCorrectPeerSendsAreCountedAndChangeNothing) {
  ready(4);
  std::uint64_t reserve = stat("flow.credit_reserve");
  rogue_.grant(4, 1);                               // a target below the floor of 2
  rogue_.grant(4 + SendCredits::kMaxGrant + 1, 8);  // a loan no receiver makes
  rogue_.grant(4, 4, 31);                           // 31 of its 32 given back: below the floor
  rogue_.grant(4, 4, 0, 0, wire::kGrantSize - 1);   // short
  rogue_.grant(4, 4, 0, 0, wire::kGrantSize + 8);   // long
  ASSERT_TRUE(pump([&] { return stat("wire.parse_errors") >= 5; }));
  settle();
  EXPECT_EQ(stat("wire.parse_errors"), 5u);
  EXPECT_EQ(stat("flow.credits_granted"), 32u);
  EXPECT_EQ(stat("flow.credits_held"), 4u);
  EXPECT_EQ(stat("flow.credit_reserve"), reserve);
  rogue_.data(1, 5, 42);
  ASSERT_TRUE(pump([&] { return delivered_.size() == 1; })) << "the connection goes on";
}

TEST_F(ProtocolTest, CreditsAPeerGivesBackReturnToTheReserveAndAnAskIsLentAtLeastTheGrant) {
  ready(4);
  std::uint64_t reserve = stat("flow.credit_reserve");
  rogue_.grant(4, 4, 30);  // gives back 30 of its 32: 2 left, and 6 of 8 posted receives go
  ASSERT_TRUE(pump([&] { return stat("flow.credits_granted") == 2; }));
  EXPECT_EQ(stat("flow.credits_reclaimed"), 30u);
  EXPECT_EQ(stat("flow.credit_reserve"), reserve + 30 + 6);
  rogue_.grant(4, 4, 30, 50);  // 50 of its messages wait
  ASSERT_TRUE(pump([&] { return rogue_.last_grant().lent == 32 + 50; }));
  EXPECT_EQ(rogue_.last_grant().target, 52u);
  EXPECT_EQ(stat("flow.credits_granted"), 52u);
  EXPECT_EQ(stat("flow.credits_lent"), 50u);
  rogue_.grant(4, 4, 30, 500);  // beyond SLUICE_CREDITS_MAX (128)
  ASSERT_TRUE(pump([&] { return rogue_.last_grant().lent == 32 + 50 + 76; }));
  EXPECT_EQ(stat("flow.credits_granted"), 128u);
  // 100 kept: more than SLUICE_CREDITS' receive slots could hold, all within the loan's.
  keep_ = true;
  for (std::uint32_t s = 1; s <= 100; ++s) rogue_.data(s, 5, s);
  ASSERT_TRUE(pump([&] { return delivered_.size() == 100; }));
  EXPECT_EQ(stat("wire.parse_errors"), 0u);
}

TEST_F(ProtocolTest, APeerWhoseCreditsTheApplicationHoldsIsNotLentMore) {
  keep_ = true;
  ready(4);
  for (std::uint32_t s = 1; s <= 32; ++s) rogue_.data(s, 5, s);
  ASSERT_TRUE(pump([&] { return delivered_.size() == 32; }));
  rogue_.grant(4, 4, 0, 10);
  ASSERT_TRUE(pump([&] { return stat("flow.credit_asks") == 1; }));
  settle();
  EXPECT_EQ(stat("flow.credits_lent"), 0u) << "a slow receiver: its sender must feel it";
  EXPECT_EQ(stat("flow.credits_granted"), 32u);
}

TEST_F(ProtocolTest, ACallerAsksForAWiderWindowAndKeepsToALowerOneOnceItsCallsFit) {
  expect_hello();
  rogue_.hello(64, 77, wire::kVersion, /*rpc_window=*/1);
  std::uint32_t v = 0;
  int replies = 0;
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(
        engine_->peer(1)->call(6, {}, std::as_bytes(std::span(&v, 1)), {}, [&](absl::Status, Message&) { ++replies; }),
        Result::kOk);
  }
  auto requests = [&] {
    return std::count_if(rogue_.received().begin(), rogue_.received().end(),
                         [](const Received& r) { return (r.header.flags & wire::kFlagRequest) != 0; });
  };
  ASSERT_TRUE(pump([&] { return requests() == 1 && rogue_.last_grant().calls_waiting != 0; }));
  EXPECT_EQ(rogue_.last_grant().calls_waiting, 9u) << "its calls waiting for the window";
  EXPECT_EQ(rogue_.last_grant().window_seen, 1u);
  rogue_.grant(64, 64, 0, 0, wire::kGrantSize, /*window=*/10);
  ASSERT_TRUE(pump([&] { return requests() == 10; }));
  EXPECT_EQ(stat("rpc.window_held"), 10u);
  rogue_.grant(64, 64, 0, 0, wire::kGrantSize, /*window=*/2);  // recalled while 10 are outstanding
  settle();
  EXPECT_EQ(rogue_.last_grant().window_seen, 1u) << "not kept to before its calls fit";
  std::vector<Received> reqs;
  for (const auto& r : rogue_.received())
    if (r.header.flags & wire::kFlagRequest) reqs.push_back(r);
  for (std::size_t i = 0; i < 8; ++i) {  // 8 replies: 2 outstanding
    wire::Header h;
    h.flags = wire::kFlagReply;
    h.seq = i + 1;
    h.rpc_id = reqs[i].header.rpc_id;
    rogue_.send(h, {});
  }
  ASSERT_TRUE(pump([&] { return replies == 8 && rogue_.last_grant().window_seen == 2; }));
  EXPECT_EQ(stat("rpc.window_held"), 2u);
  EXPECT_EQ(stat("wire.parse_errors"), 0u);
}

}  // namespace
}  // namespace sluice::detail
