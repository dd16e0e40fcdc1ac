// The RPC client (internal): this engine's calls to its peers. It owns the table of outstanding
// calls (deadlines, overdue warnings, cancel, reply landings) and each peer's caller part (the
// call window the server granted and the requests waiting for it); the sender carries the
// requests, the receiver hands it the replies.
#pragma once

#include <cassert>
#include <deque>
#include <span>

#include <sluice/engine.h>

#include "am/call.h"
#include "am/op.h"
#include "flow/flow.h"
#include "wire/wire.h"

namespace sluice::detail {

class EngineCore;
struct PeerData;

// A peer's caller part: written by RpcClient alone, read by anyone.
class CallsTo {
 public:
  // Requests waiting for the window.
  bool waiting() const { return !queue_.empty(); }
  std::size_t queued() const { return queue_.size(); }
  const CallWindow& window() const { return window_; }
  // The server's window we keep to (a lower one once our outstanding calls fit it): GRANTs
  // tell the server, which then shrinks what it holds for us.
  std::uint32_t kept() const { return kept_; }

 private:
  friend class RpcClient;
  std::deque<Pending> queue_;
  CallWindow window_;
  std::uint32_t kept_ = 0;
};

class RpcClient {
 public:
  explicit RpcClient([[maybe_unused]] EngineCore& e) { assert(&engine() == &e); }
  RpcClient(const RpcClient&) = delete;
  RpcClient& operator=(const RpcClient&) = delete;

  Result call(PeerData& p, HandlerId method, std::span<const std::byte> header, std::span<const std::byte> payload,
              const CallOptions& options, ReplyCallback&& cb, CallId* id, PayloadCopy copy = PayloadCopy::kNo);
  void cancel(CallId id);
  // A reply from `p` (complete, or the header of one whose payload lands in the call's buffer).
  void on_reply(PeerData& p, Message& m);
  void on_reply_rx_done(Op* op, absl::StatusCode code, std::size_t length);
  // The server declined the reply's payload (`why`): the call fails, its place in the window is free.
  void reply_declined(PeerData& p, CallId id, const std::string& why);

  // The peer's HELLO granted `window` (a restarted peer's: 0 until then); its GRANT's window
  // (a loan, or a recall: kept, and said, once our outstanding calls fit it).
  void grant(PeerData& p, std::uint32_t window);
  void regrant(PeerData& p, std::uint32_t window);
  // The sender drains: requests waiting for the window join the send queue while it has room.
  void start_waiting(PeerData& p);
  // Deadlines and overdue warnings (the engine's timer tick); whether any call is outstanding.
  void expire(Clock::time_point now);
  bool idle() const { return calls_.empty(); }
  bool has_calls_to(const PeerData& p) const;

  // The peer failed (in fail_peer's order): first its requests waiting for the window complete with
  // `status`; later, once its exact receives are cancelled, its calls do (those with a posted
  // reply receive once that receive is back) and its window starts over.
  void drop_waiting(PeerData& p, const absl::Status& status);
  void end_calls(PeerData& p, const absl::Status& status);
  // The engine closes: every call ends Cancelled, at once; then (once every peer is closed)
  // what is left of the table goes.
  void close();
  void clear() { calls_.clear(); }

 private:
  Result refusal(const PeerData& p, HandlerId method, bool has_cb, std::size_t header, std::size_t payload);
  void finish(CallId id, absl::Status status);
  // A call in the window ended (replied, or its reply declined): its place is free and a
  // waiting request may go.
  void window_freed(PeerData& p);
  // Its callback is about to run: the method's counters (and its latency, when timed).
  void ended(const Call& c, bool ok);
  // The reply-buffer receive of call `id`, posted before its request leaves.
  void post_reply_rx(PeerData& p, Call& c, CallId id, std::span<std::byte> buffer);
  // A new call's deadline and when it is logged as overdue (SLUICE_CALL_WARN).
  struct Deadlines {
    Clock::time_point deadline, warn_at;
  };
  Deadlines deadlines(Duration timeout) const;

  EngineCore& engine() const;  // the engine holding this (EngineCore::of)
  CallTable<Call> calls_;
};

}  // namespace sluice::detail
