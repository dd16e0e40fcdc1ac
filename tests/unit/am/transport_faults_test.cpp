// Faults only the fake transport can stage (lib/transport/fake.h): two real engines in one
// process, driven from one thread, with the fabric dropping, holding or failing chosen
// messages.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "testing/ranks.h"
#include "transport/fake.h"
#include "wire/wire.h"

namespace sluice::detail {
namespace {

using fake::Action;
using fake::Fabric;
using fake::Packet;
using testing_support::bytes_of;
using testing_support::RankPair;

constexpr HandlerId kSink = 20, kMethod = 21, kPlain = 22;

// The wire header of a message in flight (false for a rendezvous payload, which has none).
bool header_of(const Packet& p, wire::Header* h) {
  if (wire::tag_class(p.tag) != wire::kEager && wire::tag_class(p.tag) != wire::kCtrl) return false;
  return wire::decode(p.bytes, h) == wire::Parse::kOk;
}

bool is_ctrl(const Packet& p, std::uint16_t kind) {
  wire::Header h;
  return header_of(p, &h) && (h.flags & wire::kFlagCtrl) && h.handler == kind;
}

class TransportFaults : public ::testing::Test {
 protected:
  void SetUp() override { Fabric::reset(); }
  void TearDown() override { Fabric::reset(); }

  void make(Config config = Config()) { pair_.emplace(config); }
  Engine& e(int r) { return pair_->engine(r); }
  std::uint64_t stat(int r, const char* name) { return e(r).stats().value(name); }
  // Rank r's handler kPlain appends each message's int payload to `into`.
  void collect_ints(int r, std::vector<int>& into) {
    ASSERT_TRUE(e(r).register_handler(kPlain,
                                      [&into](Message& m) {
                                        int v;
                                        std::memcpy(&v, m.payload().data(), sizeof(v));
                                        into.push_back(v);
                                      })
                    .ok());
  }

  // Progresses both engines from this thread until `done` or 10 s.
  bool pump(const std::function<bool()>& done, Duration limit = std::chrono::seconds(10)) {
    auto deadline = Clock::now() + limit;
    while (!done()) {
      e(0).progress();
      e(1).progress();
      if (Clock::now() > deadline) return false;
    }
    return true;
  }

  std::optional<RankPair> pair_;
};

TEST_F(TransportFaults, LostCreditReturnsAreRecoveredFromTheNextHeartbeat) {
  // Two credits; each release owes one, and a CREDIT goes at once. Both of the first two are
  // lost: without a repair the sender would wait for ever with 18 messages queued.
  Config c;
  c.credits = 2;
  c.credits_max = 2;  // no loans: only the heartbeat's count can free the sender
  c.heartbeat = std::chrono::milliseconds(20);
  make(c);
  Fabric::on_send([](const Packet& p) { return is_ctrl(p, wire::kCredit); }, Action::kDrop, 2);
  int got = 0;
  ASSERT_TRUE(e(1).register_handler(kPlain, [&](Message&) { ++got; }).ok());
  int sent = 0;
  for (int i = 0; i < 20; ++i) {
    Result r = e(0).peer(1)->send_copy(kPlain, {}, bytes_of(i));
    ASSERT_EQ(r, Result::kOk);  // beyond the credits, queued
    ++sent;
  }
  ASSERT_TRUE(pump([&] { return got == sent; })) << got << " of " << sent << " delivered";
  EXPECT_EQ(Fabric::acted(), 2u) << "both CREDITs were dropped";
  EXPECT_EQ(stat(0, "flow.credits_recovered"), 2u);
  EXPECT_TRUE(e(0).peer(1)->alive());
}

TEST_F(TransportFaults, AHelloThatArrivesAfterItsSendersDataIsWaitedForNotLost) {
  // Both ranks start the handshake at once, so both HELLOs travel on the CTRL class (neither
  // has the other's key yet). Rank 1's is held; rank 1, ready once rank 0's HELLO is in,
  // sends its data on rank 0's EAGER tag, and that arrives first. It waits for the HELLO and
  // is delivered in order.
  make();
  Fabric::on_send(
      [](const Packet& p) {
        wire::Header h;
        wire::Hello hello;
        return is_ctrl(p, wire::kHello) && header_of(p, &h) &&
               wire::decode_hello(p.bytes.subspan(wire::kHeaderSize, h.user_header_len), &hello) == wire::Parse::kOk &&
               hello.rank == 1;
      },
      Action::kHold);
  std::vector<int> got0, got1;
  collect_ints(0, got0);
  ASSERT_TRUE(e(1).register_handler(kPlain, [&](Message&) { got1.push_back(0); }).ok());
  ASSERT_EQ(e(0).peer(1)->send_copy(kPlain, {}, bytes_of(0)), Result::kOk);
  for (int i = 1; i <= 3; ++i) ASSERT_EQ(e(1).peer(0)->send_copy(kPlain, {}, bytes_of(i)), Result::kOk);
  // Rank 1's data reaches rank 0 (the fabric holds only the HELLO) and waits there.
  ASSERT_FALSE(pump([&] { return !got0.empty(); }, std::chrono::milliseconds(300)));
  EXPECT_EQ(Fabric::held(), 1u);
  EXPECT_EQ(Fabric::release_held(), 1u);
  ASSERT_TRUE(pump([&] { return got0.size() == 3 && got1.size() == 1; }));
  EXPECT_EQ(got0, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(stat(0, "am.dropped"), 0u);
}

TEST_F(TransportFaults, ALinkThatFailsBetweenTheAnnouncementAndThePayloadGivesTheSinkBufferBack) {
  make();
  // The 64 KiB payload's own message fails the link: the announcement is in, the payload never.
  Fabric::on_send([](const Packet& p) { return wire::tag_class(p.tag) == wire::kRndv; }, Action::kFailLink);
  std::vector<std::byte> block(64 * 1024);
  int sunk = 0, returned = 0, handled = 0;
  HandlerOptions o;
  o.sink = [&](const Message&, std::size_t size) {
    ++sunk;
    return std::span(block).first(size);
  };
  o.sink_release = [&](const Message&, std::span<std::byte> buffer) {
    EXPECT_EQ(buffer.data(), block.data());
    ++returned;
  };
  ASSERT_TRUE(e(1).register_handler(
                      kSink, [&](Message&) { ++handled; }, o)
                  .ok());
  std::vector<std::byte> payload(64 * 1024, std::byte{7});
  std::optional<absl::Status> done;
  ASSERT_EQ(e(0).peer(1)->send(kSink, {}, payload, [&](absl::Status s) { done = s; }), Result::kOk);
  ASSERT_TRUE(pump([&] { return done.has_value() && returned == 1 && !e(1).peer(0)->alive(); }))
      << "sunk " << sunk << ", returned " << returned;
  EXPECT_EQ(Fabric::acted(), 1u);
  EXPECT_EQ(done->code(), absl::StatusCode::kUnavailable) << *done;
  EXPECT_EQ(sunk, 1);
  EXPECT_EQ(handled, 0);
  EXPECT_FALSE(e(0).peer(1)->alive());
  EXPECT_EQ(stat(1, "am.sink_returned"), 1u);
}

TEST_F(TransportFaults, ADuplicatedMessageIsDeliveredOnceAndItsReturnedCreditsCountOnce) {
  // Rank 1 answers each of rank 0's messages with one of its own, which carries the credit it
  // owes back. Every answer arrives twice: the copy is dropped by its sequence number, and the
  // credit in it must not be counted again (rank 0 would then believe it may send more than
  // rank 1 reserved for it).
  make();
  int got1 = 0, got0 = 0;
  ASSERT_TRUE(e(1).register_handler(kPlain,
                                    [&](Message& m) {
                                      ++got1;
                                      ASSERT_EQ(m.peer()->send_copy(kMethod, {}, m.payload()), Result::kOk);
                                    })
                  .ok());
  ASSERT_TRUE(e(0).register_handler(kMethod, [&](Message&) { ++got0; }).ok());
  ASSERT_EQ(e(0).peer(1)->send_copy(kPlain, {}, bytes_of(0)), Result::kOk);
  ASSERT_TRUE(pump([&] { return got0 == 1; }));
  Fabric::on_send(
      [](const Packet& p) {
        wire::Header h;
        return wire::tag_index(p.tag) == 1 && header_of(p, &h) && h.handler == kMethod;
      },
      Action::kDuplicate, 1000);
  constexpr int kRounds = 200;
  for (int i = 1; i <= kRounds; ++i) {
    ASSERT_EQ(e(0).peer(1)->send_copy(kPlain, {}, bytes_of(i)), Result::kOk);
    ASSERT_TRUE(pump([&] { return got0 == i + 1; }));
  }
  EXPECT_EQ(got1, kRounds + 1);
  EXPECT_EQ(stat(0, "am.duplicates_dropped"), static_cast<std::uint64_t>(kRounds));
  EXPECT_EQ(stat(0, "wire.parse_errors"), 0u) << "credits counted twice overflow the grant";
}

TEST_F(TransportFaults, SendsTheTransportRefusesTakeTheQueuedPathAndArriveInOrder) {
  // The transport answers "not now" to every small send after the handshake (a full queue):
  // each message goes the ordinary way (a send-pool slot, a posted send) instead, in order.
  make();
  std::vector<int> got;
  collect_ints(1, got);
  ASSERT_EQ(e(0).peer(1)->send_copy(kPlain, {}, bytes_of(0)), Result::kOk);
  ASSERT_TRUE(pump([&] { return got.size() == 1; }));
  std::uint64_t inline_before = stat(0, "am.sent_inline");
  Fabric::on_send([](const Packet& p) { return p.bytes.size() <= 92; }, Action::kRefuse, 1000);
  for (int i = 1; i <= 100; ++i) {
    Result r;
    while ((r = e(0).peer(1)->send_copy(kPlain, {}, bytes_of(i))) == Result::kWouldBlock) e(0).progress();
    ASSERT_EQ(r, Result::kOk);
  }
  ASSERT_TRUE(pump([&] { return got.size() == 101; })) << got.size();
  for (int i = 0; i <= 100; ++i) ASSERT_EQ(got[static_cast<std::size_t>(i)], i);
  EXPECT_EQ(stat(0, "am.sent_inline"), inline_before) << "none left inline";
  EXPECT_GT(Fabric::acted(), 0u) << "inline sends were tried and refused (the rest queued behind them)";
}

TEST_F(TransportFaults, AReplyThatArrivesAfterItsCallWasCancelledIsCountedAndDropped) {
  make();
  // Replies are held until the caller has cancelled.
  Fabric::on_send(
      [](const Packet& p) {
        wire::Header h;
        return header_of(p, &h) && (h.flags & wire::kFlagReply);
      },
      Action::kHold);
  ASSERT_TRUE(
      e(1).register_handler(kMethod, [&](Message& m) { ASSERT_EQ(m.reply_copy({}, m.payload()), Result::kOk); }).ok());
  std::vector<absl::StatusCode> first;
  CallId id = 0;
  ASSERT_EQ(e(0).peer(1)->call(
                kMethod, {}, bytes_of(41), {}, [&](absl::Status s, Message&) { first.push_back(s.code()); }, &id),
            Result::kOk);
  ASSERT_TRUE(pump([&] { return Fabric::held() == 1; }));
  e(0).cancel(id);
  EXPECT_EQ(first, std::vector<absl::StatusCode>{absl::StatusCode::kCancelled});
  Fabric::release_held();
  ASSERT_TRUE(pump([&] { return stat(0, "rpc.late_replies") == 1; }));
  EXPECT_EQ(first.size(), 1u) << "the callback ran once";
  // The slot and the credit the late reply brought back are usable: the next call completes.
  int value = 0;
  ASSERT_EQ(e(0).peer(1)->call(kMethod, {}, bytes_of(42), {},
                               [&](absl::Status s, Message& m) {
                                 ASSERT_TRUE(s.ok()) << s;
                                 std::memcpy(&value, m.payload().data(), sizeof(value));
                               }),
            Result::kOk);
  ASSERT_TRUE(pump([&] { return value == 42; }));
}

}  // namespace
}  // namespace sluice::detail
