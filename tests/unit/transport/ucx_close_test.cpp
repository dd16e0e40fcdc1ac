// Closing a failed peer's endpoint (Worker::close_failed) against real UCX: two workers of this
// process, A and B, each with an endpoint to the other, as two ranks have.
//
// UCX 1.13.1 learns a peer endpoint's id lazily: an endpoint's first rendezvous send sends a
// wire-up request carrying its own id. When A's and B's requests cross, A's endpoint takes B's
// id from B's request. Were B's endpoint then destroyed (a bare force close) before B handled
// A's request, a new internal endpoint of B's would answer it with another id, and A would
// abort in ucp_ep.inl:215 (`remote_id == ucp_ep_ext_control(ep)->remote_ep_id`): issue 33's
// "another rank aborts inside UCX" after a peer was failed under 2 MiB traffic.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "transport/transport.h"
#include "transport/ucx.h"

namespace sluice::detail {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Done : TransportOp {
  std::atomic<int> calls{0};
  std::atomic<absl::StatusCode> code{absl::StatusCode::kUnknown};
};

void record(TransportOp* op, absl::StatusCode code, std::size_t, Tag) {
  auto* d = static_cast<Done*>(op);
  d->code = code;
  ++d->calls;
}

// One side: its own UCP context and worker (so that each may be progressed on its own thread)
// and its endpoint to the other side.
struct Side {
  std::unique_ptr<TransportContext> ctx;
  std::unique_ptr<Worker> worker;
  Endpoint ep;
};

class FailedPeerClose : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    Config config;
    config.tls = GetParam();
    for (Side* s : {&a_, &b_}) {
      auto ctx = TransportContext::create(config);
      ASSERT_TRUE(ctx.ok()) << ctx.status();
      s->ctx = std::move(*ctx);
      auto w = Worker::create(*s->ctx);
      ASSERT_TRUE(w.ok()) << w.status();
      s->worker = std::move(*w);
    }
    for (auto [from, to] : {std::pair{&a_, &b_}, std::pair{&b_, &a_}}) {
      auto ep = from->worker->connect(
          to->worker->address(), [](void*, int) {}, nullptr);
      ASSERT_TRUE(ep.ok()) << ep.status();
      from->ep = std::move(*ep);
    }
    // A small eager message each way, both workers progressed: connections (TCP) are up, and
    // neither endpoint knows the other's id yet (eager sends need none).
    small_a_.on_complete = small_b_.on_complete = record;
    ASSERT_NE(a_.ep.post_send(&small_a_, small_.data(), small_.size(), 1, nullptr).kind, Post::kError);
    ASSERT_NE(b_.ep.post_send(&small_b_, small_.data(), small_.size(), 1, nullptr).kind, Post::kError);
    progress_both(milliseconds(200));
  }

  void TearDown() override {
    // Both sides settle what is under way (A answers B's wire-up), then close as a failed
    // peer's endpoint is closed.
    progress_both(milliseconds(200));
    for (Side* s : {&a_, &b_}) {
      if (s->ep.valid())
        (void)s->worker->wait_request(s->worker->close_failed(s->ep, milliseconds(300)),
                                      Clock::now() + milliseconds(500));
    }
    progress_both(milliseconds(50));
  }

  void progress_both(Clock::duration d) {
    for (auto until = Clock::now() + d; Clock::now() < until;) {
      a_.worker->progress();
      b_.worker->progress();
    }
  }

  // Starts a 2 MiB (rendezvous) send from `s` to the other side: its wire-up request goes now.
  static void send_big(Side& s, Done& d, std::vector<std::byte>& buf) {
    d.on_complete = record;
    PostResult r = s.ep.post_send(&d, buf.data(), buf.size(), 2, nullptr);
    ASSERT_EQ(r.kind, Post::kPending) << "a 2 MiB send waits for its receiver";
  }

  // The operations outlive the test body: what the endpoints still hold completes at TearDown.
  Done small_a_, small_b_, big_a_op_, big_b_op_;
  std::vector<std::byte> small_ = std::vector<std::byte>(8);
  std::vector<std::byte> big_a_ = std::vector<std::byte>(std::size_t{2} << 20);
  std::vector<std::byte> big_b_ = std::vector<std::byte>(std::size_t{2} << 20);
  Side a_, b_;  // last: its endpoints and workers go first
};

TEST_P(FailedPeerClose, AnEndpointWhoseWireUpCrossedThePeersIsClosedWithoutAbortingThePeer) {
  Done& db = big_b_op_;
  send_big(a_, big_a_op_, big_a_);
  send_big(b_, db, big_b_);
  // A runs on as a live rank does: it handles B's wire-up request (taking B's endpoint id)
  // while B, busy elsewhere, has not yet handled A's. Then B fails A and closes its endpoint.
  std::atomic<bool> stop{false};
  std::thread rank_a([&] {
    while (!stop) a_.worker->progress();
  });
  std::this_thread::sleep_for(milliseconds(100));
  auto t0 = Clock::now();
  void* close = b_.worker->close_failed(b_.ep, std::chrono::seconds(2));
  absl::Status closed = b_.worker->wait_request(close, Clock::now() + std::chrono::seconds(1));
  auto took = Clock::now() - t0;
  // B handles what A sent, A what B's UCX answers: with a bare force close, A aborts here.
  for (auto until = Clock::now() + milliseconds(300); Clock::now() < until;) b_.worker->progress();
  stop = true;
  rank_a.join();
  EXPECT_TRUE(closed.ok()) << closed;
  EXPECT_FALSE(b_.ep.valid());
  EXPECT_LT(took, milliseconds(1500)) << "a live peer answers the flush well within its bound";
  EXPECT_EQ(db.calls, 1) << "B's send ended with the close";
  EXPECT_NE(db.code, absl::StatusCode::kOk);
}

TEST_P(FailedPeerClose, ASilentPeersEndpointIsForceClosedOnceTheFlushBoundPasses) {
  // B's first rendezvous send waits for A's answer to its wire-up request; A never progresses.
  Done& db = big_b_op_;
  send_big(b_, db, big_b_);
  auto t0 = Clock::now();
  void* close = b_.worker->close_failed(b_.ep, milliseconds(300));
  absl::Status closed = b_.worker->wait_request(close, Clock::now() + std::chrono::seconds(1));
  auto took = Clock::now() - t0;
  EXPECT_TRUE(closed.ok()) << closed;
  EXPECT_FALSE(b_.ep.valid());
  EXPECT_GE(took, milliseconds(300)) << "the flush waits for the wire-up the peer never answers";
  EXPECT_LT(took, milliseconds(1300));
  for (int i = 0; i < 100 && db.calls == 0; ++i) b_.worker->progress();
  EXPECT_EQ(db.calls, 1) << "the force close ends the send";
  EXPECT_NE(db.code, absl::StatusCode::kOk);
}

INSTANTIATE_TEST_SUITE_P(Transports, FailedPeerClose, ::testing::Values("", "tcp"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param).empty() ? std::string("Default") : std::string("Tcp");
                         });

}  // namespace
}  // namespace sluice::detail
