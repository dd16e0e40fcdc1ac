// The stream transport on its own: two connections over a socketpair, each side's hub
// progressed by hand. Matching, rendezvous into the posted buffer, bounds, failures, cancel,
// close, and the sealed (encrypted) mode with tampering.
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "transport/stream.h"

namespace sluice::detail {
namespace {

struct Done {
  TransportOp op;
  int calls = 0;
  absl::StatusCode code = absl::StatusCode::kUnknown;
  std::size_t length = 0;
  Tag tag = 0;
  Done() {
    op.on_complete = [](TransportOp* o, absl::StatusCode c, std::size_t len, Tag t) {
      Done* d = reinterpret_cast<Done*>(o);  // op is the first member
      ++d->calls;
      d->code = c;
      d->length = len;
      d->tag = t;
    };
  }
};

struct Side {
  StreamHub hub;
  StreamConn* conn = nullptr;
  int errors = 0;
  static void on_error(void* arg, int) { ++static_cast<Side*>(arg)->errors; }
};

class StreamPair : public ::testing::Test {
 protected:
  void open(StreamOptions o = {}, std::uint8_t suite = 0, bool tamper_keys = false) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    StreamOptions oa = o, ob = o;
    oa.suite = ob.suite = suite;
    for (std::size_t i = 0; i < 32; ++i) {
      oa.tx_key[i] = ob.rx_key[i] = static_cast<std::byte>(i);
      oa.rx_key[i] = ob.tx_key[i] = static_cast<std::byte>(100 + i);
    }
    if (tamper_keys) ob.rx_key[0] = std::byte{0xff};
    a.conn = a.hub.open(oa, &Side::on_error, &a);
    b.conn = b.hub.open(ob, &Side::on_error, &b);
    a.conn->attach(sv[0]);
    b.conn->attach(sv[1]);
    raw_b = sv[1];
  }
  // Progresses both sides until `done` or a bound of rounds.
  template <typename F>
  void run(F done) {
    for (int i = 0; i < 20000 && !done(); ++i) {
      a.hub.progress();
      b.hub.progress();
    }
  }
  void round_trip_sealed() {
    auto small = bytes(300, 7), big = bytes((1 << 20) + 17, 8);
    std::vector<std::byte> r1(4096), r2(big.size());
    Done s1, s2, d1, d2;
    b.conn->post_recv(&d1.op, r1.data(), r1.size(), 1, kFullMask);
    b.conn->post_recv(&d2.op, r2.data(), r2.size(), 2, kFullMask);
    a.conn->post_send(&s1.op, small.data(), small.size(), 1);
    a.conn->post_send(&s2.op, big.data(), big.size(), 2);
    run([&] { return d2.calls == 1; });
    EXPECT_EQ(d1.length, small.size());
    EXPECT_EQ(std::memcmp(r1.data(), small.data(), small.size()), 0);
    EXPECT_EQ(r2, big);
    EXPECT_EQ(a.errors + b.errors, 0);
  }
  static std::vector<std::byte> bytes(std::size_t n, int seed) {
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
    return v;
  }
  Side a, b;
  int raw_b = -1;
};

TEST_F(StreamPair, EagerMessagesMatchPostedReceivesInPostingOrderAndWaitWhenNoneIsPosted) {
  open();
  auto m1 = bytes(100, 1), m2 = bytes(200, 2);
  Done s1, s2;
  EXPECT_NE(a.conn->post_send(&s1.op, m1.data(), m1.size(), 7).kind, Post::kError);
  EXPECT_NE(a.conn->post_send(&s2.op, m2.data(), m2.size(), 7).kind, Post::kError);
  // Nothing posted yet: both wait as unexpected messages.
  run([&] { return b.conn->has_unexpected(7, kFullMask); });
  ASSERT_TRUE(b.conn->has_unexpected(7, kFullMask));
  std::vector<std::byte> r1(8192), r2(8192);
  Done d1, d2;
  b.conn->post_recv(&d1.op, r1.data(), r1.size(), 7, kFullMask);
  b.conn->post_recv(&d2.op, r2.data(), r2.size(), 7, kFullMask);
  EXPECT_EQ(d1.calls, 1);  // an arrived message completes its receive inside the post
  run([&] { return d2.calls == 1; });
  EXPECT_EQ(d1.length, 100u);
  EXPECT_EQ(d2.length, 200u);
  EXPECT_EQ(std::memcmp(r1.data(), m1.data(), 100), 0);
  EXPECT_EQ(std::memcmp(r2.data(), m2.data(), 200), 0);
  EXPECT_EQ(d1.tag, 7u);
}

TEST_F(StreamPair, LargeMessageWaitsForItsReceiveThenLandsInThePostedBuffer) {
  StreamOptions o;
  o.eager_max = 1024;
  open(o);
  auto big = bytes(3 << 20, 3);
  Done s;
  ASSERT_EQ(a.conn->post_send(&s.op, big.data(), big.size(), 9).kind, Post::kPending);
  run([&] { return b.conn->has_unexpected(9, kFullMask); });
  EXPECT_EQ(s.calls, 0) << "the payload stays at the sender until the receiver asks";
  std::vector<std::byte> land(big.size());
  Done d;
  b.conn->post_recv(&d.op, land.data(), land.size(), 9, kFullMask);
  run([&] { return d.calls == 1 && s.calls == 1; });
  EXPECT_EQ(d.code, absl::StatusCode::kOk);
  EXPECT_EQ(d.length, big.size());
  EXPECT_EQ(s.code, absl::StatusCode::kOk);
  EXPECT_EQ(land, big);
}

TEST_F(StreamPair, MessageLargerThanItsReceiveCompletesOutOfRangeAndTheStreamGoesOn) {
  open();
  auto m = bytes(500, 4), next = bytes(10, 5);
  Done s1, s2, d1, d2;
  std::vector<std::byte> small(100), r2(100);
  b.conn->post_recv(&d1.op, small.data(), small.size(), 1, kFullMask);
  b.conn->post_recv(&d2.op, r2.data(), r2.size(), 1, kFullMask);
  a.conn->post_send(&s1.op, m.data(), m.size(), 1);
  a.conn->post_send(&s2.op, next.data(), next.size(), 1);
  run([&] { return d2.calls == 1; });
  EXPECT_EQ(d1.code, absl::StatusCode::kOutOfRange);
  EXPECT_EQ(d2.code, absl::StatusCode::kOk);
  EXPECT_EQ(std::memcmp(r2.data(), next.data(), 10), 0);
  EXPECT_EQ(b.errors, 0);
}

TEST_F(StreamPair, PeerSendingBeyondTheUnexpectedBoundFails) {
  StreamOptions o;
  o.unexpected_max = 4096;
  open(o);
  auto m = bytes(1000, 6);
  std::vector<Done> sends(8);
  for (auto& s : sends) a.conn->post_send(&s.op, m.data(), m.size(), 5);
  run([&] { return b.errors != 0; });
  EXPECT_EQ(b.errors, 1);
  EXPECT_NE(b.conn->failure().find("more than its credits allow"), std::string::npos) << b.conn->failure();
}

TEST_F(StreamPair, MalformedFramesFailTheConnectionWithTheirReason) {
  struct Case {
    stream::Header h;
    const char* why;
  } cases[] = {
      {{stream::Kind::kCts, 0, 0, 42}, "never announced"},
      {{stream::Kind::kData, 10, 0, 42}, "never cleared"},
      {{stream::Kind::kEager, 1u << 30, 1, 0}, "above the bound"},
  };
  for (const Case& c : cases) {
    Side x, y;
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    x.conn = x.hub.open({}, &Side::on_error, &x);
    x.conn->attach(sv[0]);
    std::byte raw[stream::kHeaderSize];
    stream::encode(c.h, raw);
    ASSERT_EQ(::write(sv[1], raw, sizeof(raw)), static_cast<ssize_t>(sizeof(raw)));
    for (int i = 0; i < 100 && x.errors == 0; ++i) x.hub.progress();
    EXPECT_EQ(x.errors, 1) << c.why;
    EXPECT_NE(x.conn->failure().find(c.why), std::string::npos) << x.conn->failure();
    ::close(sv[1]);
  }
  // A reserved byte set, and an unknown kind.
  for (std::uint8_t first : {0, 5, 200}) {
    Side x;
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    x.conn = x.hub.open({}, &Side::on_error, &x);
    x.conn->attach(sv[0]);
    std::byte raw[stream::kHeaderSize] = {};
    raw[0] = static_cast<std::byte>(first);
    ASSERT_EQ(::write(sv[1], raw, sizeof(raw)), static_cast<ssize_t>(sizeof(raw)));
    for (int i = 0; i < 100 && x.errors == 0; ++i) x.hub.progress();
    EXPECT_NE(x.conn->failure().find("malformed"), std::string::npos) << int(first);
    ::close(sv[1]);
  }
}

TEST_F(StreamPair, PeerClosingMidFrameFailsAndCloseCancelsWhatIsOpen) {
  open();
  std::vector<std::byte> r(64);
  Done d;
  b.conn->post_recv(&d.op, r.data(), r.size(), 3, kFullMask);
  std::byte raw[stream::kHeaderSize];
  stream::encode({stream::Kind::kEager, 50, 3, 0}, raw);
  int fd = a.conn->fd();
  ASSERT_EQ(::write(fd, raw, 10), 10);  // part of a header, then the connection goes
  ::shutdown(fd, SHUT_WR);
  run([&] { return b.errors != 0; });
  EXPECT_NE(b.conn->failure().find("in the middle of a frame"), std::string::npos) << b.conn->failure();
  EXPECT_EQ(d.calls, 0);
  b.hub.close(b.conn);
  EXPECT_EQ(d.calls, 1);
  EXPECT_EQ(d.code, absl::StatusCode::kCancelled);
}

TEST_F(StreamPair, CancelTakesBackAPostedReceiveAndAnAnnouncedSend) {
  StreamOptions o;
  o.eager_max = 16;
  open(o);
  std::vector<std::byte> r(64);
  Done d;
  b.conn->post_recv(&d.op, r.data(), r.size(), 3, kFullMask);
  b.conn->cancel(&d.op);
  EXPECT_EQ(d.code, absl::StatusCode::kCancelled);
  auto big = bytes(1000, 1);
  Done s;
  ASSERT_EQ(a.conn->post_send(&s.op, big.data(), big.size(), 4).kind, Post::kPending);
  a.conn->cancel(&s.op);
  EXPECT_EQ(s.code, absl::StatusCode::kCancelled);
}

// Sealed: an eager message and a large one whose last piece is shorter than a chunk.
TEST_F(StreamPair, SealedWithChaCha20Poly1305CarriesEagerAndLargeMessages) {
  StreamOptions o;
  o.eager_max = 4096;
  open(o, std::uint8_t(stream::Suite::kChaCha20Poly1305));
  round_trip_sealed();
}

TEST_F(StreamPair, SealedWithAes256GcmCarriesEagerAndLargeMessages) {
  if (!stream::aes_available()) GTEST_SKIP() << "no AES-NI on this CPU";
  StreamOptions o;
  o.eager_max = 4096;
  open(o, std::uint8_t(stream::Suite::kAes256Gcm));
  round_trip_sealed();
}

TEST_F(StreamPair, SealedStreamFailsOnAWrongKey) {
  StreamOptions o;
  open(o, std::uint8_t(stream::Suite::kChaCha20Poly1305), /*tamper_keys=*/true);
  auto m = bytes(10, 1);
  Done s;
  a.conn->post_send(&s.op, m.data(), m.size(), 1);
  run([&] { return b.errors != 0; });
  EXPECT_NE(b.conn->failure().find("failed authentication"), std::string::npos) << b.conn->failure();
}

}  // namespace
}  // namespace sluice::detail
