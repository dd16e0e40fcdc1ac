// The RPC client: calls with deadlines and cancellation, replies into caller buffers.
#include "am/rpc_client.h"

#include <absl/strings/str_format.h>

#include "am/engine_core.h"
#include "am/send_now.h"
#include "core/log.h"

namespace sluice::detail {

// A call id fits the compact wire header (wire.h).
static_assert(CallTable<Call>::kIndexBits + CallTable<Call>::kSeqBits <= wire::kCompactIdBits);

// kOk, or why call() refuses at once: a dead peer, bad arguments, a full queue.
[[gnu::always_inline]] inline Result RpcClient::refusal(const PeerData& p, HandlerId method, bool has_cb,
                                                        std::size_t header, std::size_t payload) {
  if (p.state() == PeerState::kDead) return Result::kUnavailable;
  if (!has_cb)
    return engine().guard_.invalid(absl::StrFormat("call(method %d) to %s: no reply callback", method, p.name()));
  if (header > kMaxUserHeader || payload > engine().config_.max_message)
    return engine().guard_.invalid(absl::StrFormat(
        "call(method %d) to %s: header of %u bytes (at most %u) or payload of %u (at most %u, SLUICE_MAX_MESSAGE)",
        method, p.name(), header, kMaxUserHeader, payload, engine().config_.max_message));
  // (A deque's size() costs a dozen instructions; the calls' queue is empty on the fast path.)
  std::size_t queued = p.tx.queued() + (p.calls.queue_.empty() ? 0 : p.calls.queue_.size());
  if (queued >= engine().config_.send_queue_max) {
    engine().c_.would_block->add();
    return Result::kWouldBlock;
  }
  return Result::kOk;
}

Result RpcClient::call(PeerData& p, HandlerId method, std::span<const std::byte> header,
                       std::span<const std::byte> payload, const CallOptions& options, ReplyCallback&& cb,
                       CallId* id_out, PayloadCopy copy) {
  if (Result r = refusal(p, method, static_cast<bool>(cb), header.size(), payload.size()); r != Result::kOk)
      [[unlikely]]
    return r;
  CallsTo& mine = p.calls;
  CallId id = calls_.reserve();
  if (id == 0) [[unlikely]] {  // a million calls outstanding: wait for some to finish
    engine().c_.would_block->add();
    return Result::kWouldBlock;
  }
  if (id >> wire::kCompactIdBits) __builtin_unreachable();  // (the static_assert above): no check below
  std::uint8_t flags = wire::kFlagRequest;
  if (!options.reply_buffer.empty()) flags |= wire::kFlagReplyBuf;
  Outgoing out{.flags = flags,
               .handler = method,
               .header = header,
               .payload = payload,
               .rpc_id = id,
               .aux = options.reply_buffer.size(),
               .status = 0};
  Op* header_op = nullptr;
  Op* payload_op = nullptr;
  bool fragmented = false;
  // A small request leaves at once when nothing waits for the window or a credit (a reply buffer's
  // receive is posted before its request leaves, so those take the ordinary path).
  bool sent = options.reply_buffer.empty() && mine.queue_.empty() && mine.window_.may_start() &&
              engine().sender_.send_inline(p, out);
  Result r = Result::kOk;
  if (sent) {
    mine.window_.start();
  } else if (header.size() + payload.size() <= engine().eager_limit_ || engine().config_.rndv) {
    r = engine().sender_.pack_message(p, out, copy, &header_op, &payload_op);
  } else {
    // Bounce mode: the pieces go out at once, so the window is honoured here. A piece's
    // aux is its offset, so a large request cannot also announce a reply buffer's capacity.
    if (!options.reply_buffer.empty()) {
      calls_.unreserve(id);
      return engine().guard_.invalid(
          absl::StrFormat("call(method %d) to %s: a %u-byte request above the eager limit cannot also give a reply "
                          "buffer in bounce mode (SLUICE_RNDV=n)",
                          method, p.name(), header.size() + payload.size()));
    }
    if (p.state() != PeerState::kReady || !mine.window_.may_start()) {
      if (p.state() == PeerState::kNew) engine().link_.start_handshake(p);
      calls_.unreserve(id);
      return Result::kWouldBlock;
    }
    fragmented = true;
  }
  if (r != Result::kOk) {
    calls_.unreserve(id);
    return r;
  }
  // Made now that it is sent or queued: until then the caller keeps its callback.
  Deadlines d = deadlines(options.timeout);
  Call& c = calls_.emplace(id, p.id(), std::move(cb), d.deadline, d.warn_at, method);
  if (engine().methods_.start(MethodCounters::kClient, method)) [[unlikely]]
    c.started = Clock::now();
  if (!options.reply_buffer.empty()) post_reply_rx(p, c, id, options.reply_buffer);
  engine().c_.rpc_calls->add();
  if (id_out) *id_out = id;
  if (sent) return Result::kOk;
  if (fragmented) {
    mine.window_.start();
    return engine().sender_.send_fragmented(p, out, SendCallback());
  }
  if (p.state() == PeerState::kReady && mine.queue_.empty() && mine.window_.may_start()) {
    mine.window_.start();
    return engine().sender_.enqueue(p, header_op, payload_op);
  }
  if (p.state() == PeerState::kNew) engine().link_.start_handshake(p);
  mine.queue_.push_back({header_op, payload_op});
  if (p.state() == PeerState::kReady) engine().sender_.ask(p);  // a wider window, if the server can
  return Result::kOk;
}

RpcClient::Deadlines RpcClient::deadlines(Duration timeout) const {
  if (timeout == kInfinite) [[likely]] {
    Duration warn = engine().config_.call_warn;
    return {Clock::time_point::max(), warn == kInfinite ? Clock::time_point::max() : engine().now_ + warn};
  }
  return {Clock::now() + timeout, Clock::time_point::max()};
}

void RpcClient::post_reply_rx(PeerData& p, Call& c, CallId id, std::span<std::byte> buffer) {
  c.landing = std::make_unique<ReplyLanding>();
  c.landing->buffer = buffer;
  Op* rx = engine().ops_.take(OpKind::kReplyRx, p.id());
  rx->recv.call_id = id;
  rx->epoch = p.epoch();
  c.reply_rx = rx;
  ++engine().exact_posted_;
  PostResult pr = engine().worker_->post_recv(p.ep(), rx, buffer.data(), buffer.size(),
                                              wire::make_tag(wire::kReply, p.id(), id), kFullMask, nullptr);
  if (pr.kind != Post::kPending) engine().done_.push_back({rx, pr.code, pr.length, pr.sender_tag});
}

void RpcClient::grant(PeerData& p, std::uint32_t window) {
  p.calls.window_.grant(window);
  p.calls.kept_ = window;
}

void RpcClient::regrant(PeerData& p, std::uint32_t window) {
  CallsTo& mine = p.calls;
  mine.window_.grant(window);
  // Kept once at most `window` calls are outstanding (sent, or queued to be sent): the server
  // may then admit no more than that.
  if (mine.kept_ == window || mine.window_.outstanding() > window) return;
  bool lower = window < mine.kept_;
  mine.kept_ = window;
  if (lower) engine().control_.send_grant(p);
}

void RpcClient::start_waiting(PeerData& p) {
  CallsTo& mine = p.calls;
  while (!mine.queue_.empty() && mine.window_.may_start()) {
    Pending m = mine.queue_.front();
    mine.queue_.pop_front();
    mine.window_.start();
    if (m.payload == nullptr && engine().sender_.send_packed_now(p, m.header)) continue;
    (void)engine().sender_.enqueue(p, m.header, m.payload);
  }
}

// Inlined into on_reply, every reply's path.
[[gnu::always_inline]] inline void RpcClient::window_freed(PeerData& p) {
  p.calls.window_.finish();
  if (p.calls.kept_ > p.calls.window_.granted()) [[unlikely]]
    regrant(p, p.calls.window_.granted());         // a lower window now fits
  if (p.has_waiting()) engine().sender_.flush(p);  // a request waiting for the window may go now
}

void RpcClient::on_reply(PeerData& p, Message& m) {
  window_freed(p);
  Call* found = calls_.find(state(m).rpc_id);
  if (found == nullptr || found->finishing) {
    engine().c_.rpc_late_replies->add();
    SLUICE_LOG_RATE_LIMITED(kInfo, "rpc", "late reply from %s for call %u discarded", p.name(), state(m).rpc_id);
    return;
  }
  Call& c = *found;
  if (c.started != Clock::time_point{}) [[unlikely]]
    p.traffic.sample_rtt(Clock::now() - c.started);
  absl::StatusCode code = code_from_wire(state(m).status);
  if (code != absl::StatusCode::kOk) {
    std::string text = absl::StrFormat("%s answered call %u of method %d with %s", p.name(), state(m).rpc_id, c.method,
                                       absl::StatusCodeToString(code));
    if (!state(m).payload.empty())
      text.append(": ").append(reinterpret_cast<const char*>(state(m).payload.data()), state(m).payload.size());
    finish(state(m).rpc_id, absl::Status(code, text));
    return;
  }
  CallId id = state(m).rpc_id;
  if (state(m).reply_buf) {
    if (c.landing == nullptr || state(m).announced > c.landing->buffer.size()) [[unlikely]] {
      // A reply into a buffer the call did not give (or larger than it): the peer broke the
      // protocol. The call fails now rather than wait for a payload that has nowhere to land.
      engine().c_.parse_errors->add();
      finish(id, absl::InternalError(absl::StrFormat("%s answered call %u into a reply buffer it did not have room for",
                                                     p.name(), id)));
      return;
    }
    ReplyLanding& l = *c.landing;
    l.header_arrived = true;
    l.payload_len = state(m).announced;
    l.reply = std::move(m);
    if (l.payload_len == 0 || l.payload_landed) {
      state(l.reply).payload = l.buffer.first(l.payload_len);
      finish(id, absl::OkStatus());
    }
    return;
  }
  if (c.reply_rx == nullptr) [[likely]] {
    // Complete as it arrived: the callback gets this message (no moves through the call),
    // with its method (a compact reply does not carry it).
    state(m).handler = c.method;
    ReplyCallback cb = std::move(c.on_reply);
    if (c.started != Clock::time_point{}) [[unlikely]]
      ended(c, true);  // (an untimed call that succeeded has nothing to count)
    calls_.erase(id);
    cb(absl::OkStatus(), m);
    return;
  }
  // A reply to a call with a reply buffer (landing exists), not sent into it (an error
  // status, or a reply the server packed whole): the buffer's receive is cancelled first.
  c.landing->reply = std::move(m);
  finish(id, absl::OkStatus());
}

void RpcClient::on_reply_rx_done(Op* op, absl::StatusCode code, std::size_t length) {
  --engine().exact_posted_;
  CallId id = op->recv.call_id;
  engine().ops_.give(op);
  Call* found = calls_.find(id);
  if (found == nullptr) return;
  Call& c = *found;
  c.reply_rx = nullptr;
  ReplyLanding& l = *c.landing;  // a call with a posted reply receive has one
  if (c.finishing) {
    finish(id, l.final_status);
    return;
  }
  if (code != absl::StatusCode::kOk) {
    finish(id,
           absl::Status(code == absl::StatusCode::kOutOfRange ? code : absl::StatusCode::kUnavailable,
                        absl::StrFormat("reply payload of call %u failed: %s", id, absl::StatusCodeToString(code))));
    return;
  }
  l.payload_landed = true;
  l.payload_len = length;
  if (PeerData* p = engine().peers_.by_index(c.peer)) engine().c_.received(p->traffic, 0, length);
  if (l.header_arrived) {
    state(l.reply).payload = l.buffer.first(length);
    finish(id, absl::OkStatus());
  }
}

void RpcClient::reply_declined(PeerData& p, CallId id, const std::string& why) {
  window_freed(p);
  if (Call* c = calls_.find(id); c != nullptr && !c->finishing)
    finish(id, absl::ResourceExhaustedError(absl::StrFormat("reply from %s: %s", p.name(), why)));
}

void RpcClient::ended(const Call& c, bool ok) {
  bool timed = c.started != Clock::time_point{};
  if (ok && !timed) [[likely]]
    return;
  std::int64_t ns = timed ? std::max<std::int64_t>(1, (Clock::now() - c.started).count()) : 0;  // call() to callback
  engine().methods_.end(MethodCounters::kClient, c.method, ok, static_cast<std::uint64_t>(ns));
}

// `status` by value: it may be the call's own final_status, which erasing the call destroys.
void RpcClient::finish(CallId id, absl::Status status) {
  Call* found = calls_.find(id);
  if (found == nullptr) return;
  Call& c = *found;
  if (c.reply_rx != nullptr) {
    // The transport may still write into the caller's buffer: complete once it cannot.
    c.finishing = true;
    c.landing->final_status = std::move(status);
    engine().worker_->cancel(c.reply_rx);
    return;
  }
  ReplyCallback cb = std::move(c.on_reply);
  Message reply = c.landing ? std::move(c.landing->reply) : Message();
  ended(c, status.ok());
  calls_.erase(id);
  if (!status.ok()) reply = Message();
  cb(status, reply);
}

void RpcClient::expire(Clock::time_point now) {
  if (calls_.empty()) return;
  auto due = [&](const Call& c) { return !c.finishing && (c.deadline <= now || c.warn_at <= now); };
  for (CallId id : calls_.ids_where(due)) {
    Call& c = *calls_.find(id);
    PeerData* p = engine().peers_.by_index(c.peer);
    const char* peer = p != nullptr ? p->name().c_str() : "a gone peer";
    if (c.deadline <= now) {
      engine().c_.rpc_deadline->add();
      finish(id, absl::DeadlineExceededError(
                     absl::StrFormat("call %u of method %d to %s passed its deadline", id, c.method, peer)));
      continue;
    }
    auto age = std::chrono::duration_cast<std::chrono::milliseconds>(now - (c.warn_at - engine().config_.call_warn));
    c.warn_at = Clock::time_point::max();
    engine().c_.rpc_overdue->add();
    SLUICE_LOG_RATE_LIMITED(kWarn, "rpc",
                            "call %u of method %d to %s has waited %s for its reply, without a timeout; it goes on "
                            "waiting (SLUICE_CALL_WARN=%s; CallOptions::timeout or Engine::cancel end it)",
                            id, c.method, peer, format_duration(age), format_duration(engine().config_.call_warn));
  }
}

void RpcClient::cancel(CallId id) {
  Call* found = calls_.find(id);
  if (found == nullptr || found->finishing) return;
  engine().c_.rpc_cancelled->add();
  finish(id, absl::CancelledError(absl::StrFormat("call %u cancelled", id)));
}

bool RpcClient::has_calls_to(const PeerData& p) const {
  return !calls_.ids_where([&](const Call& c) { return c.peer == p.id(); }).empty();
}

void RpcClient::drop_waiting(PeerData& p, const absl::Status& status) {
  engine().sender_.drop_queue(p, p.calls.queue_, status);
}

void RpcClient::end_calls(PeerData& p, const absl::Status& status) {
  for (CallId id : calls_.ids_where([&](const Call& c) { return c.peer == p.id(); })) finish(id, status);
  p.calls.window_.reset();
}

void RpcClient::close() {
  // Calls end at once, Cancelled: those waiting only for their replies, and requests still
  // queued for the server's window (which frees only with another reply). A server that answers
  // late, or never, would otherwise hold the close until the deadline.
  absl::Status closing = absl::CancelledError("the engine is shutting down");
  engine().peers_.for_each([&](PeerData& p) { engine().sender_.drop_queue(p, p.calls.queue_, closing); });
  for (CallId id : calls_.ids_where([](const Call& c) { return !c.finishing; })) {
    engine().c_.rpc_cancelled->add();
    finish(id, closing);
  }
}

}  // namespace sluice::detail
