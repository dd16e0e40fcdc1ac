// The Landings component (lib/am/landings.h) against a rogue peer that announces payloads by
// hand: a payload lands in its handler's sink, one the receive budget can never hold is
// declined without failing its peer, and later messages wait for an ordered payload.
#include <cstdlib>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "unit/am/rogue.h"

namespace sluice::detail {
namespace {

using rogue::ProtocolTest;
using rogue::Received;
using Bytes = std::vector<std::byte>;

constexpr HandlerId kBulk = 7;

class LandingsTest : public ProtocolTest {
 protected:
  // A rendezvous announcement of `size` bytes for kBulk, with sequence `seq`.
  void announce(std::uint64_t seq, std::uint32_t size) {
    wire::Header h;
    h.flags = wire::kFlagRndv;
    h.handler = kBulk;
    h.seq = seq;
    h.payload_len = size;
    rogue_.send(h, {});
  }
  // The payload itself, on the RNDV tag of its sequence (our slot at the engine is 1).
  void payload(std::uint64_t seq, Bytes bytes) {
    rogue_.send_raw(std::move(bytes), wire::make_tag(wire::kRndv, 1, seq));
  }
  std::vector<Received> declines() {
    std::vector<Received> out;
    for (const auto& r : rogue_.received())
      if ((r.header.flags & wire::kFlagCtrl) && r.header.handler == wire::kDecline) out.push_back(r);
    return out;
  }
};

TEST_F(LandingsTest, APayloadLandsInTheBufferItsHandlersSinkGives) {
  std::vector<std::byte> buffer(4096);
  std::vector<std::size_t> landed;
  HandlerOptions o;
  o.sink = [&](const Message&, std::size_t size) { return std::span(buffer).first(size); };
  ASSERT_TRUE(engine_
                  ->register_handler(
                      kBulk,
                      [&](Message& m) {
                        EXPECT_EQ(m.payload().data(), buffer.data()) << "not copied: it landed in the sink's buffer";
                        landed.push_back(m.payload().size());
                      },
                      o)
                  .ok());
  expect_hello();
  rogue_.hello(8);
  announce(1, 3000);
  payload(1, Bytes(3000, std::byte{0x5a}));
  ASSERT_TRUE(pump([&] { return !landed.empty(); }));
  EXPECT_EQ(landed, std::vector<std::size_t>{3000});
  EXPECT_EQ(buffer[2999], std::byte{0x5a});
  EXPECT_EQ(stat("am.rndv_received"), 1u);
}

TEST_F(LandingsTest, AnOrderedPayloadHoldsBackTheMessagesAfterIt) {
  std::vector<int> order;
  ASSERT_TRUE(engine_->register_handler(kBulk, [&](Message&) { order.push_back(1); }).ok());
  keep_ = false;
  expect_hello();
  rogue_.hello(8);
  announce(1, 20000);
  rogue_.data(2, 5, 42);  // a small message after it, on handler 5 (delivered_)
  settle();
  EXPECT_TRUE(delivered_.empty()) << "message 2 waits for payload 1";
  payload(1, Bytes(20000, std::byte{1}));
  ASSERT_TRUE(pump([&] { return delivered_.size() == 1; }));
  EXPECT_EQ(order, std::vector<int>{1});
}

class TinyBudgetTest : public LandingsTest {
 protected:
  void SetUp() override {
    setenv("SLUICE_RECV_POOL_MAX", "16M", 1);
    ProtocolTest::SetUp();
    unsetenv("SLUICE_RECV_POOL_MAX");
  }
};

TEST_F(TinyBudgetTest, APayloadTheBudgetCanNeverHoldIsDeclinedAndItsPeerLives) {
  int delivered_bulk = 0;
  ASSERT_TRUE(engine_->register_handler(kBulk, [&](Message&) { ++delivered_bulk; }).ok());
  expect_hello();
  rogue_.hello(8);
  announce(1, 64u << 20);  // 64 MiB against a 16 MiB receive pool
  ASSERT_TRUE(pump([&] { return !declines().empty(); }));
  Received d = declines().front();
  EXPECT_EQ(d.header.aux, 1u) << "the DECLINE names the payload's sequence";
  std::string why(reinterpret_cast<const char*>(d.body.data()), d.body.size());
  EXPECT_NE(why.find("SLUICE_RECV_POOL_MAX"), std::string::npos) << why;
  EXPECT_EQ(delivered_bulk, 0);
  EXPECT_TRUE(engine_->peer(1)->alive());
  rogue_.data(2, 5, 9);  // the connection goes on
  ASSERT_TRUE(pump([&] { return delivered_.size() == 1; }));
}

}  // namespace
}  // namespace sluice::detail
