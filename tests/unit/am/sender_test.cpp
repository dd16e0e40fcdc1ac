// The Sender component (lib/am/sender.h) against a rogue peer that grants and returns credits
// by hand: no message leaves without a credit, credits beyond the grant are refused, queued
// sends coalesce, a heartbeat's count recovers a lost credit return, a failing peer completes
// its queued sends once, and SLUICE_SEND_QUEUE_MAX bounds the queue.
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "unit/am/rogue.h"

namespace sluice::detail {
namespace {

using rogue::ProtocolTest;
using rogue::Received;

class SenderTest : public ProtocolTest {
 protected:
  static std::uint32_t value_of(const Received& r) {
    std::uint32_t v = 0;
    std::memcpy(&v, r.body.data() + r.header.user_header_len, sizeof(v));
    return v;
  }
};

TEST_F(SenderTest, NoMessageLeavesWithoutACreditAndTheRestFollowInSequenceOrder) {
  expect_hello();  // message 1 waits for the handshake
  rogue_.hello(4);
  for (std::uint32_t v = 2; v <= 7; ++v) ASSERT_EQ(send(v), Result::kOk);
  ASSERT_TRUE(pump([&] { return data().size() >= 4; }));
  settle();
  ASSERT_EQ(data().size(), 4u) << "4 credits granted: 4 messages, 3 wait";
  EXPECT_GT(stat("flow.credit_stalls"), 0u);
  rogue_.credit(2);
  ASSERT_TRUE(pump([&] { return data().size() >= 6; }));
  settle();
  EXPECT_EQ(data().size(), 6u) << "2 credits back: 2 more";
  rogue_.credit(1);
  ASSERT_TRUE(pump([&] { return data().size() >= 7; }));
  for (std::size_t i = 0; i < data().size(); ++i) {
    EXPECT_EQ(data()[i].header.seq, i + 1);
    EXPECT_EQ(value_of(data()[i]), i + 1);
  }
}

TEST_F(SenderTest, CreditsReturnedBeyondTheGrantAreAParseErrorAndIgnored) {
  ready(4);
  for (std::uint32_t v = 2; v <= 6; ++v) ASSERT_EQ(send(v), Result::kOk);
  ASSERT_TRUE(pump([&] { return data().size() >= 4; }));
  rogue_.credit(5);  // 4 granted, 4 spent: 5 back is one more than ever was
  ASSERT_TRUE(pump([&] { return stat("wire.parse_errors") >= 1; }));
  settle();
  EXPECT_EQ(stat("wire.parse_errors"), 1u);
  EXPECT_EQ(data().size(), 4u) << "the bad return gave no credit";
  rogue_.credit(2);
  ASSERT_TRUE(pump([&] { return data().size() >= 6; }));
  settle();
  EXPECT_EQ(data().size(), 6u);
  EXPECT_TRUE(engine_->peer(1)->alive());
}

TEST_F(SenderTest, QueuedSmallSendsCoalesceIntoOneTaggedMessageWithMoreFlags) {
  ready(8);
  for (std::uint32_t v = 2; v <= 8; ++v) ASSERT_EQ(send(v), Result::kOk);  // the 7 credits left
  ASSERT_TRUE(pump([&] { return data().size() == 8; }));
  std::uint64_t coalesced = stat("am.coalesced");
  for (std::uint32_t v = 9; v <= 12; ++v) ASSERT_EQ(send(v, v - 9), Result::kOk);  // no credit: queued
  settle();
  ASSERT_EQ(data().size(), 8u);
  EXPECT_TRUE(done_[0].empty()) << "a queued send has not completed";
  rogue_.credit(4);
  ASSERT_TRUE(pump([&] { return data().size() == 12; }));
  settle();
  std::vector<Received> got = data();
  for (std::size_t i = 8; i < 12; ++i) {
    EXPECT_EQ(got[i].header.seq, i + 1);
    EXPECT_EQ(value_of(got[i]), i + 1);
    EXPECT_EQ(got[i].batch, got[8].batch) << "message " << i + 1 << " rode in the same tagged message";
    bool more = (got[i].header.flags & wire::kFlagMore) != 0;
    EXPECT_EQ(more, i < 11) << "MORE on all but the last of the batch, message " << i + 1;
  }
  EXPECT_NE(got[7].batch, got[8].batch);
  EXPECT_EQ(stat("am.coalesced") - coalesced, 3u);
  ASSERT_EQ(done_.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    ASSERT_EQ(done_[i].size(), 1u) << "send " << i + 9 << " completes once";
    EXPECT_TRUE(done_[i][0].ok()) << done_[i][0];
  }
}

TEST_F(SenderTest, AHeartbeatsCountOfReturnedCreditsRecoversALostReturn) {
  ready(4);
  for (std::uint32_t v = 2; v <= 7; ++v) ASSERT_EQ(send(v), Result::kOk);
  ASSERT_TRUE(pump([&] { return data().size() >= 4; }));
  settle();
  ASSERT_EQ(data().size(), 4u);
  // The rogue says it returned 3 credits in all; the engine saw none (lost on the way).
  rogue_.ctrl(wire::kPing, /*aux=*/3);
  ASSERT_TRUE(pump([&] { return data().size() >= 7; })) << "the 3 recovered credits carry the 3 waiting";
  settle();
  EXPECT_EQ(data().size(), 7u);
  EXPECT_EQ(stat("flow.credits_recovered"), 3u);
  ASSERT_FALSE(rogue_.heartbeats().empty());
  EXPECT_EQ(rogue_.heartbeats().back().header.handler, wire::kPong);
}

TEST_F(SenderTest, AFailingPeerCompletesEveryQueuedSendOnceWithUnavailable) {
  ready(4);
  ASSERT_EQ(send(2, 0, 20000), Result::kOk);  // rendezvous: its payload waits for the rogue
  ASSERT_EQ(send(3, 1), Result::kOk);
  ASSERT_EQ(send(4, 2), Result::kOk);                                             // the last credit
  for (std::uint32_t v = 5; v <= 9; ++v) ASSERT_EQ(send(v, v - 2), Result::kOk);  // queued, coalesced
  ASSERT_EQ(send(10, 8, 20000), Result::kOk);                                     // queued rendezvous
  ASSERT_TRUE(pump([&] { return data().size() >= 4; }));
  settle();
  ASSERT_EQ(data().size(), 4u);
  EXPECT_EQ(done_[1].size(), 1u) << "a sent small message completes at once";
  std::string why = "go away";
  rogue_.ctrl(wire::kReject, 0, std::as_bytes(std::span(why)));
  ASSERT_TRUE(pump([&] { return !engine_->peer(1)->alive(); }));
  settle();
  ASSERT_EQ(done_.size(), 9u);
  for (std::size_t i = 0; i < done_.size(); ++i) {
    ASSERT_EQ(done_[i].size(), 1u) << "send " << i + 2 << " completes exactly once";
    if (i == 1 || i == 2) continue;  // sent: OK
    EXPECT_EQ(done_[i][0].code(), absl::StatusCode::kUnavailable) << "send " << i + 2 << ": " << done_[i][0];
    EXPECT_NE(done_[i][0].message().find("go away"), std::string::npos) << done_[i][0];
  }
  EXPECT_EQ(send(11), Result::kUnavailable);
}

class SendQueueMaxTest : public SenderTest {
 protected:
  void SetUp() override {
    setenv("SLUICE_SEND_QUEUE_MAX", "4", 1);
    ProtocolTest::SetUp();
    unsetenv("SLUICE_SEND_QUEUE_MAX");
  }
};

TEST_F(SendQueueMaxTest, TheQueueHoldsAtMostSendQueueMaxThenSaysWouldBlock) {
  expect_hello();  // message 1 queued for the handshake
  for (std::uint32_t v = 2; v <= 4; ++v) ASSERT_EQ(send(v), Result::kOk);
  std::uint64_t blocked = stat("flow.would_block");
  EXPECT_EQ(send(5, 0), Result::kWouldBlock) << "4 messages queued: SLUICE_SEND_QUEUE_MAX=4";
  EXPECT_EQ(stat("flow.would_block"), blocked + 1);
  rogue_.hello(8);
  ASSERT_TRUE(pump([&] { return data().size() == 4; }));
  EXPECT_EQ(send(5, 0), Result::kOk) << "the queue drained";
  ASSERT_TRUE(pump([&] { return data().size() == 5; }));
  ASSERT_EQ(done_[0].size(), 1u);
  EXPECT_TRUE(done_[0][0].ok());
}

}  // namespace
}  // namespace sluice::detail
