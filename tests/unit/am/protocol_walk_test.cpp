// Seeded random walks through the engine's receive state machine (docs/reliability.md: "a stateful
// target running frame sequences through the receive state machine"). After a proper
// handshake, the rogue rank sends frames drawn at random — in order, compact, early,
// duplicate and stale, coalesced batches with a corrupt or control message in them, wrong
// lengths, unknown handlers, flag combinations no sender builds, credit returns beyond the
// grant — and the engine must, after every burst:
//   - have delivered to the handler exactly the sequence 1, 2, 3, ... (each once, in order,
//     skipping only numbers the walk gave to an unregistered handler),
//   - keep the connection (nothing here is a protocol mismatch),
//   - keep its receive slots within what it reserved;
// and at the end, once the rogue re-sends, in order, what it sent early, broken or into a
// dropped batch, deliver every number it used.
//
// The rogue keeps to its credits as a sender must (one per message sent on its EAGER tag; what
// the engine returns, piggybacked or explicit, comes back): a message the engine rejects or
// drops returns none, so each walk is as long as its credits last, and many seeds make up
// for it. Under scripts/sanitize asan the walks also run with ASan and UBSan.
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "unit/am/rogue.h"

namespace sluice::detail {
namespace {

using rogue::ProtocolTest;
using Bytes = std::vector<std::byte>;

constexpr std::uint16_t kHandler = 5;     // registered by the fixture: records the value
constexpr std::uint16_t kNoHandler = 77;  // registered by nobody

// Over all seeds: the walks as a whole must have reached the error paths they are for.
struct Totals : ::testing::Environment {
  std::uint64_t numbers = 0, parse_errors = 0, duplicates = 0;
  void TearDown() override {
    std::printf("walks: %llu numbers sent, %llu parse errors, %llu duplicates\n",
                static_cast<unsigned long long>(numbers), static_cast<unsigned long long>(parse_errors),
                static_cast<unsigned long long>(duplicates));
    EXPECT_GT(numbers, 500u);
    EXPECT_GT(parse_errors, 0u);
    EXPECT_GT(duplicates, 0u);
  }
};
Totals& totals = *static_cast<Totals*>(::testing::AddGlobalTestEnvironment(new Totals));

class ProtocolWalk : public ProtocolTest, public ::testing::WithParamInterface<std::uint64_t> {
 protected:
  enum Kind {
    kNext,
    kCompactNext,
    kEarly,
    kStale,
    kResend,
    kBatch,
    kBadLength,
    kUnknownHandler,
    kCredit,
    kOddFlags,
    kGrant,
    kKinds
  };
  static constexpr int kWeights[kKinds] = {30, 12, 8, 3, 6, 10, 2, 3, 5, 3, 3};

  Kind draw() {
    std::discrete_distribution<int> d(std::begin(kWeights), std::end(kWeights));
    return static_cast<Kind>(d(rng_));
  }
  std::uint64_t below(std::uint64_t n) { return std::uniform_int_distribution<std::uint64_t>(0, n - 1)(rng_); }

  // Credits the rogue may still spend: the engine's grant, less what it sent, plus what came back.
  std::int64_t credits() const {
    return static_cast<std::int64_t>(granted_ + rogue_.credits_returned()) - static_cast<std::int64_t>(spent_);
  }

  // A data message to `handler` at `seq` whose payload is seq * 10, with the full header.
  void data(std::uint64_t seq, std::uint16_t handler = kHandler) {
    rogue_.data(seq, handler, static_cast<std::uint32_t>(seq * 10));
    ++spent_;
  }

  // A full header with the magic and version right and everything else odd: flag
  // combinations no sender builds, lengths that disagree with the bytes. Its sequence is one
  // already delivered or far ahead, so that a frame the engine does accept cannot take a
  // number the walk relies on.
  void odd_flags() {
    wire::Header h;
    // No RNDV, FRAG or CTRL: a rendezvous announcement beyond SLUICE_MAX_MESSAGE ends the
    // peer by design.
    constexpr std::uint8_t kAllowed =
        wire::kFlagRequest | wire::kFlagReply | wire::kFlagReplyBuf | wire::kFlagMore | wire::kFlagCompact;
    h.flags = static_cast<std::uint8_t>(below(256)) & kAllowed;
    h.handler = below(2) ? kHandler : static_cast<std::uint16_t>(below(1100));
    h.user_header_len = static_cast<std::uint16_t>(below(3) == 0 ? below(2000) : 0);
    h.payload_len = static_cast<std::uint32_t>(below(3) == 0 ? below(100000) : 4);
    h.seq = below(2) && expect_ > 1 ? 1 + below(expect_ - 1) : next_ + 1000 + below(1000);
    h.rpc_id = below(4);
    Bytes body(below(64));
    for (auto& b : body) b = static_cast<std::byte>(below(256));
    rogue_.send(h, body);
    ++spent_;
  }

  // A full header whose payload length disagrees with the bytes sent.
  void bad_length(std::uint64_t seq) {
    wire::Header h;
    h.handler = kHandler;
    h.seq = seq;
    h.payload_len = 4 + 1 + static_cast<std::uint32_t>(below(64));
    auto v = static_cast<std::uint32_t>(seq * 10);
    rogue_.send(h, std::as_bytes(std::span(&v, 1)));
    ++spent_;
  }

  // One frame at random, within the credits (`room` of them at least).
  void step(std::int64_t room) {
    switch (draw()) {
      case kNext: data(next_++); break;
      case kCompactNext:
        rogue_.compact_data(next_, kHandler, static_cast<std::uint32_t>(next_ * 10));
        ++next_;
        ++spent_;
        break;
      case kEarly: data(next_ + 1 + below(6)); break;  // held early; its own turn comes later
      case kStale:
        if (next_ > 1) data(1 + below(next_ - 1));
        break;
      case kResend: data(first_gap()); break;  // a retransmission of the first number missing
      case kBatch: {
        std::size_t n = 2 + below(static_cast<std::uint64_t>(std::min<std::int64_t>(room, 4) - 1));
        // A corrupt message or a CREDIT inside: it and the rest of the batch are dropped,
        // the ones before it stand; the walk moves past the whole batch either way (what was
        // dropped is a gap for a resend). Never the first: a tagged message whose first
        // header has a bad magic is another protocol, and ends the peer.
        std::size_t corrupt = below(4) == 0 ? 1 + below(n - 1) : SIZE_MAX;
        std::size_t ctrl = corrupt == SIZE_MAX && below(6) == 0 ? n - 1 : SIZE_MAX;
        rogue_.coalesced(next_, n, corrupt, ctrl);
        next_ += ctrl == SIZE_MAX ? n : n - 1;  // the CREDIT carries no sequence
        spent_ += n;
        break;
      }
      case kBadLength: bad_length(next_); break;  // rejected: next_ is still to be sent
      case kUnknownHandler:
        // Taken in order and dropped for want of a handler: the number is used up.
        data(next_, kNoHandler);
        maybe_consumed_.insert(next_++);
        break;
      case kCredit: rogue_.credit(static_cast<std::uint16_t>(below(48))); break;  // control: no credit spent
      case kOddFlags: odd_flags(); break;
      // An ask for more credits (the walk keeps spending only the HELLO's), or a GRANT with a
      // target below the floor (counted, nothing changes). Our own grant to the engine stays.
      case kGrant: rogue_.grant(32, below(2) ? 32 : 1, 0, static_cast<std::uint32_t>(below(64))); break;
      case kKinds: break;
    }
  }

  // The lowest number handler 5 has not had yet (skipping those an unknown handler took).
  std::uint64_t first_gap() const {
    std::uint64_t s = expect_;
    while (maybe_consumed_.count(s) != 0) ++s;
    return s;
  }

  // What must hold after every burst.
  void check_invariants() {
    for (; checked_ < delivered_.size(); ++checked_) {
      std::uint64_t got = delivered_[checked_] / 10;
      while (got != expect_ && maybe_consumed_.count(expect_) != 0) ++expect_;
      ASSERT_EQ(got, expect_) << "delivery " << checked_ << ": out of order, twice or skipped";
      ASSERT_EQ(delivered_[checked_], got * 10);
      ++expect_;
    }
    ASSERT_TRUE(engine_->peer(1)->alive()) << "nothing the walk sends is a protocol mismatch";
    PoolStats rs = engine_->pool_stats(Direction::kRecv);
    const PoolClassStats& eager = rs.classes[0];
    ASSERT_LE(eager.slots_total - eager.slots_free, eager.reserved);
  }

  void pump_a_little() {
    pump_for([] { return false; }, std::chrono::microseconds(300));
  }

  std::mt19937_64 rng_;
  std::uint64_t granted_ = 0, spent_ = 0;
  std::uint64_t next_ = 1;    // the lowest number the walk has not sent in order yet
  std::uint64_t expect_ = 1;  // the number check_invariants expects next
  std::set<std::uint64_t> maybe_consumed_;
  std::size_t checked_ = 0;
};

TEST_P(ProtocolWalk, RandomFramesDeliverEachMessageOnceInOrder) {
  std::uint64_t seed = GetParam();
  rng_.seed(seed);
  granted_ = expect_hello().credits;
  rogue_.hello(32);
  // The random part: while credits last (a few held back for the resends), up to 600 frames.
  for (int i = 0; i < 600; ++i) {
    if (credits() < 8) pump_for([&] { return credits() >= 8; }, std::chrono::milliseconds(50));
    if (credits() < 8) break;  // what is still out was rejected or dropped: it stays out
    step(credits() - 4);
    if (i % 4 == 3) {
      pump_a_little();
      ASSERT_NO_FATAL_FAILURE(check_invariants()) << "seed " << seed;
    }
  }
  pump_a_little();
  ASSERT_NO_FATAL_FAILURE(check_invariants()) << "seed " << seed;
  // The resends: every number not yet delivered, in order, as credits come back.
  std::uint64_t last = next_ - 1;
  for (std::uint64_t s = first_gap(); s <= last; s = std::max(s + 1, first_gap())) {
    ASSERT_TRUE(pump([&] { return credits() > 0; })) << "seed " << seed << ": no credit came back";
    if (maybe_consumed_.count(s) == 0) data(s);
    pump_a_little();
    ASSERT_NO_FATAL_FAILURE(check_invariants()) << "seed " << seed;
  }
  EXPECT_TRUE(pump([&] {
    check_invariants();
    return first_gap() > last;
  })) << "seed "
      << seed << ": delivered up to " << expect_ - 1 << " of " << last;
  ASSERT_NO_FATAL_FAILURE(check_invariants()) << "seed " << seed;
  totals.numbers += last;
  totals.parse_errors += stat("wire.parse_errors");
  totals.duplicates += stat("am.duplicates_dropped");
}

// 24 walks of about 50 numbers each; a failure names its seed (the test's parameter).
INSTANTIATE_TEST_SUITE_P(Seeds, ProtocolWalk, ::testing::Range<std::uint64_t>(20261130, 20261130 + 24));

}  // namespace
}  // namespace sluice::detail
