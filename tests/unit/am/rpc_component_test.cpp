// The RPC client and server components (lib/am/rpc_client.h, rpc_server.h) against a rogue
// peer that speaks the wire protocol by hand: the call window, late replies, calls ending with
// their peer; the server's window check, and the answers the engine gives on a handler's behalf.
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "unit/am/rogue.h"

namespace sluice::detail {
namespace {

using rogue::ProtocolTest;
using rogue::Received;

constexpr HandlerId kMethod = 9;
absl::StatusCode wire_code(std::uint16_t v) { return static_cast<absl::StatusCode>(v); }

class RpcComponentTest : public ProtocolTest {
 protected:
  // The rogue's messages to the engine are numbered from 1, like any sender's.
  void reply_to(const Received& request, std::uint32_t value) {
    wire::Header h;
    h.flags = wire::kFlagReply;
    h.handler = request.header.handler;
    h.seq = next_seq_++;
    h.rpc_id = request.header.rpc_id;
    h.payload_len = sizeof(value);
    rogue_.send(h, std::as_bytes(std::span(&value, 1)));
  }
  void request(std::uint64_t rpc_id, HandlerId method) {
    wire::Header h;
    h.flags = wire::kFlagRequest;
    h.handler = method;
    h.seq = next_seq_++;
    h.rpc_id = rpc_id;
    rogue_.send(h, {});
  }
  // The requests the rogue received (other messages are left out).
  std::vector<Received> requests() {
    std::vector<Received> out;
    for (const auto& r : rogue_.received())
      if (r.header.flags & wire::kFlagRequest) out.push_back(r);
    return out;
  }
  std::vector<Received> replies() {
    std::vector<Received> out;
    for (const auto& r : rogue_.received())
      if (r.header.flags & wire::kFlagReply) out.push_back(r);
    return out;
  }
  Result call(std::vector<std::optional<absl::Status>>& results, Duration timeout = kInfinite) {
    std::size_t i = results.size();
    results.emplace_back();
    CallOptions o;
    o.timeout = timeout;
    std::uint32_t v = static_cast<std::uint32_t>(i);
    return engine_->peer(1)->call_copy(kMethod, {}, std::as_bytes(std::span(&v, 1)), o,
                                       [&results, i](absl::Status s, Message&) { results[i] = s; });
  }
  std::uint64_t next_seq_ = 1;
};

TEST_F(RpcComponentTest, CallsBeyondTheServersWindowWaitAndLeaveAsRepliesComeBack) {
  expect_hello();
  rogue_.hello(8, 77, wire::kVersion, /*rpc_window=*/2);
  std::vector<std::optional<absl::Status>> results;
  results.reserve(4);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(call(results), Result::kOk);
  ASSERT_TRUE(pump([&] { return requests().size() >= 2; }));
  settle();
  ASSERT_EQ(requests().size(), 2u) << "a window of two: two requests out, two waiting";
  reply_to(requests()[0], 10);
  ASSERT_TRUE(pump([&] { return requests().size() >= 3; })) << "a reply makes room for the next";
  settle();
  EXPECT_EQ(requests().size(), 3u);
  for (std::size_t i = 1; i < 4; ++i) {
    ASSERT_TRUE(pump([&] { return requests().size() > i; }));
    reply_to(requests()[i], 10 + static_cast<std::uint32_t>(i));
  }
  ASSERT_TRUE(pump([&] { return results[3].has_value(); }));
  for (const auto& r : results) EXPECT_TRUE(r.has_value() && r->ok()) << (r ? r->ToString() : "no result");
}

TEST_F(RpcComponentTest, AReplyAfterTheDeadlineIsCountedLateAndDiscarded) {
  expect_hello();
  rogue_.hello(8);
  std::vector<std::optional<absl::Status>> results;
  results.reserve(1);
  ASSERT_EQ(call(results, std::chrono::milliseconds(50)), Result::kOk);
  ASSERT_TRUE(pump([&] { return results[0].has_value(); }));
  EXPECT_EQ(results[0]->code(), absl::StatusCode::kDeadlineExceeded) << *results[0];
  EXPECT_EQ(stat("rpc.deadline_exceeded"), 1u);
  ASSERT_EQ(requests().size(), 1u);
  reply_to(requests()[0], 1);
  ASSERT_TRUE(pump([&] { return stat("rpc.late_replies") == 1; }));
  EXPECT_TRUE(engine_->peer(1)->alive());
}

TEST_F(RpcComponentTest, SentAndWaitingCallsEndWhenTheirPeerCloses) {
  expect_hello();
  rogue_.hello(8, 77, wire::kVersion, /*rpc_window=*/1);
  std::vector<std::optional<absl::Status>> results;
  results.reserve(2);
  ASSERT_EQ(call(results), Result::kOk);
  ASSERT_EQ(call(results), Result::kOk);  // waits for the window of one
  ASSERT_TRUE(pump([&] { return requests().size() == 1; }));
  wire::Header bye;
  bye.flags = wire::kFlagCtrl;
  bye.handler = wire::kBye;
  bye.aux = 0;  // nothing sent before it
  rogue_.send(bye, {});
  ASSERT_TRUE(pump([&] { return results[0].has_value() && results[1].has_value(); }));
  EXPECT_EQ(results[0]->code(), absl::StatusCode::kCancelled) << *results[0];
  EXPECT_EQ(results[1]->code(), absl::StatusCode::kCancelled) << *results[1];
  EXPECT_EQ(requests().size(), 1u) << "the waiting request never left";
}

// The server side: the window granted by the engine's HELLO (SLUICE_RPC_WINDOW).
class RpcServerTest : public RpcComponentTest {
 protected:
  void SetUp() override {
    setenv("SLUICE_RPC_WINDOW", "2", 1);
    ProtocolTest::SetUp();
    unsetenv("SLUICE_RPC_WINDOW");
  }
};

TEST_F(RpcServerTest, ARequestBeyondTheGrantedWindowIsRefusedBeforeItsHandlerRuns) {
  std::vector<Message> held;
  ASSERT_TRUE(engine_->register_handler(kMethod, [&](Message& m) { held.push_back(std::move(m)); }).ok());
  EXPECT_EQ(expect_hello().rpc_window, 2u);
  rogue_.hello(8);
  for (std::uint64_t id = 1; id <= 3; ++id) request(id, kMethod);
  ASSERT_TRUE(pump([&] { return !replies().empty(); }));
  EXPECT_EQ(held.size(), 2u) << "the third request never reached its handler";
  ASSERT_EQ(replies().size(), 1u);
  EXPECT_EQ(replies()[0].header.rpc_id, 3u);
  EXPECT_EQ(wire_code(replies()[0].header.status), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(stat("rpc.window_refused"), 1u);
  // An answer frees its place at once: the next request runs.
  ASSERT_EQ(held[0].reply_copy({}, {}), Result::kOk);
  request(4, kMethod);
  ASSERT_TRUE(pump([&] { return held.size() == 3; }));
  held.clear();
}

TEST_F(RpcServerTest, TheEngineAnswersForAHandlerThatCannot) {
  ASSERT_TRUE(engine_->register_handler(kMethod, [](Message& m) { m.release(); }).ok());
  expect_hello();
  rogue_.hello(8);
  request(1, kMethod);      // released without a reply
  request(2, kMethod + 1);  // no such method
  ASSERT_TRUE(pump([&] { return replies().size() == 2; }));
  const Received released = replies()[0];
  EXPECT_EQ(wire_code(released.header.status), absl::StatusCode::kInternal);
  std::string why(reinterpret_cast<const char*>(released.body.data()), released.body.size());
  EXPECT_NE(why.find("without a reply"), std::string::npos) << why;
  EXPECT_EQ(wire_code(replies()[1].header.status), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace sluice::detail
