// The RPC server: requests checked against the window granted, their handlers, the replies.
#include "am/rpc_server.h"

#include <absl/strings/str_format.h>

#include "am/engine_core.h"
#include "am/invoke.h"
#include "am/send_now.h"
#include "core/log.h"

namespace sluice::detail {

void RpcServer::grant(PeerData& p, std::uint32_t window) { p.requests.window_ = RequestWindow(window); }

void RpcServer::resize(PeerData& p, std::uint32_t window) { p.requests.window_.resize(window); }

void RpcServer::reply_sent(PeerData& p) { p.requests.window_.reply_done(); }

void RpcServer::answer_error(Message& m, absl::StatusCode code, std::string_view text) {
  (void)reply(m, {}, std::as_bytes(std::span(text)), static_cast<std::uint16_t>(code), PayloadCopy::kPoolOrHeap);
}

void RpcServer::on_request(PeerData& p, Message& m) {
  bool timed = engine().methods_.start(MethodCounters::kServer, state(m).handler);
  if (!p.requests.window_.try_admit()) [[unlikely]] {
    refuse(p, m);
    return;
  }
  state(m).in_window = true;
  if (timed) [[unlikely]]
    state(m).timed_since = Clock::now().time_since_epoch().count();
  Handlers::Invoke done = engine().handlers_.invoke(m);
  if (done != Handlers::Invoke::kDone) [[unlikely]]
    not_done(m, done);
}

void RpcServer::refuse(PeerData& p, Message& m) {
  // Beyond the window granted: refused before any work is done.
  RequestWindow& window = p.requests.window_;
  engine().c_.rpc_window_refused->add();
  SLUICE_LOG_RATE_LIMITED(kWarn, "rpc", "%s exceeded its RPC window of %u requests; request refused", p.name(),
                          window.capacity());
  answer_error(
      m, absl::StatusCode::kResourceExhausted,
      absl::StrFormat("the client exceeded the RPC window of %u requests the server granted it", window.capacity()));
}

void RpcServer::not_done(Message& m, Handlers::Invoke done) {
  if (done == Handlers::Invoke::kNoHandler) {
    answer_error(m, absl::StatusCode::kUnimplemented,
                 absl::StrFormat("no method %d is registered on the server", state(m).handler));
  } else if (m.valid() && !state(m).replied) {
    // The handler threw: the caller learns why; the server goes on.
    std::string what = engine().handlers_.take_error();
    what.resize(std::min<std::size_t>(what.size(), 512));
    answer_error(m, absl::StatusCode::kInternal, what);
  }
}

Result RpcServer::not_answerable(const Message& m) {
  if (!state(m).request)
    return engine().guard_.invalid(absl::StrFormat(
        "reply to handler %d's message: it is not a request (no call waits for a reply)", state(m).handler));
  return engine().guard_.invalid(
      absl::StrFormat("reply to method %d's request: it was answered already", state(m).handler));
}

[[gnu::always_inline]] inline void RpcServer::answered(PeerData& p, Message& m, bool sent, std::uint16_t status) {
  state(m).replied = true;
  if (std::int64_t since = state(m).timed_since; since != 0 || status != 0) [[unlikely]] {
    auto ns = since == 0 ? 0 : std::max<std::int64_t>(1, Clock::now().time_since_epoch().count() - since);
    engine().methods_.end(MethodCounters::kServer, state(m).handler, status == 0, static_cast<std::uint64_t>(ns));
  }
  if (state(m).in_window) {
    if (sent) p.requests.window_.release();
    else p.requests.window_.answer();
  }
  engine().c_.rpc_replies->add();
}

namespace {
// The reply to `m`, as its parts.
Outgoing reply_message(const Message& m, std::uint8_t flags, std::span<const std::byte> header,
                       std::span<const std::byte> payload, std::uint16_t status) {
  return {.flags = flags,
          .handler = state(m).handler,
          .header = header,
          .payload = payload,
          .rpc_id = state(m).rpc_id,
          .aux = 0,
          .status = status};
}
}  // namespace

// reply()'s sending, its checks passed: inline when it can, else packed (and queued).
// Inlined into reply() and reply_own(), the latter with its constants folded in.
[[gnu::always_inline]] inline Result RpcServer::send_reply(PeerData& p, Message& m, std::uint8_t flags,
                                                           std::span<const std::byte> header,
                                                           std::span<const std::byte> payload, std::uint16_t status,
                                                           PayloadCopy copy, SendCallback&& on_done, void* memh,
                                                           Op** last_out) {
  // The inline send takes a temporary of its own: inlined whole, it lives in registers, where
  // `out` below, which the out-of-line paths take by reference, lives in memory.
  if (engine().sender_.send_inline(p, reply_message(m, flags, header, payload, status))) [[likely]] {
    answered(p, m, true, status);  // its send is complete already
    engine().sender_.complete_inline(p.id(), std::move(on_done));
    return Result::kOk;
  }
  Outgoing out = reply_message(m, flags, header, payload, status);
  if (header.size() + payload.size() > engine().eager_limit_ && !engine().config_.rndv) {
    answered(p, m, false, status);
    return engine().sender_.send_fragmented(p, out, std::move(on_done), state(m).in_window);
  }
  Op* header_op = nullptr;
  Op* payload_op = nullptr;
  if (Result r = engine().sender_.pack_message(p, out, copy, &header_op, &payload_op); r != Result::kOk) return r;
  answered(p, m, false, status);
  if (payload_op != nullptr && copy == PayloadCopy::kNo && memh != nullptr) payload_op->send.payload_memh = memh;
  Op* last = payload_op ? payload_op : header_op;
  last->send.on_done = std::move(on_done);
  last->send.ends_reply = state(m).in_window;
  if (last_out != nullptr) *last_out = last;
  return engine().sender_.enqueue(p, header_op, payload_op);
}

Result RpcServer::reply(Message& m, std::span<const std::byte> header, std::span<const std::byte> payload,
                        std::uint16_t status, PayloadCopy copy, SendCallback&& on_done, void* memh, Op** last_out) {
  if (!state(m).request || state(m).replied) [[unlikely]]
    return not_answerable(m);
  PeerData& p = engine().peers_.at(state(m).peer);
  if (p.state() == PeerState::kDead || p.epoch() != state(m).epoch) {
    state(m).replied = true;
    return Result::kUnavailable;
  }
  if (header.size() > kMaxUserHeader || payload.size() > engine().config_.max_message)
    return too_large(m, p, header.size(), payload.size());
  if (state(m).reply_buf && status == 0 && payload.size() > state(m).reply_capacity) [[unlikely]]
    return reply_too_large(m, payload.size(), std::move(on_done), last_out);
  if (state(m).reply_buf && status == 0 && !payload.empty())
    return reply_into_buffer(p, m, header, payload, copy, std::move(on_done), memh, last_out);
  std::uint8_t flags = wire::kFlagReply;
  if (state(m).reply_buf && status == 0) flags |= wire::kFlagReplyBuf;
  return send_reply(p, m, flags, header, payload, status, copy, std::move(on_done), memh, last_out);
}

Result RpcServer::too_large(const Message& m, const PeerData& p, std::size_t header, std::size_t payload) {
  return engine().guard_.invalid(
      absl::StrFormat("reply to method %d from %s: header of %u bytes (at most %u) or payload of %u (at most %u, "
                      "SLUICE_MAX_MESSAGE)",
                      state(m).handler, p.name(), header, kMaxUserHeader, payload, engine().config_.max_message));
}

Result RpcServer::reply_too_large(Message& m, std::size_t payload, SendCallback&& on_done, Op** last_out) {
  std::string text = absl::StrFormat("the reply's %u-byte payload does not fit the call's %u-byte reply_buffer",
                                     payload, state(m).reply_capacity);
  return reply(m, {}, std::as_bytes(std::span(text)), static_cast<std::uint16_t>(absl::StatusCode::kOutOfRange),
               PayloadCopy::kPoolOrHeap, std::move(on_done), nullptr, last_out);
}

Result RpcServer::reply_into_buffer(PeerData& p, Message& m, std::span<const std::byte> header,
                                    std::span<const std::byte> payload, PayloadCopy copy, SendCallback&& on_done,
                                    void* memh, Op** last_out) {
  // Straight into the buffer the caller posted: exact tag on the call id.
  Outgoing announcement{.flags = wire::kFlagReply | wire::kFlagRndv | wire::kFlagReplyBuf,
                        .handler = state(m).handler,
                        .header = header,
                        .payload = {},
                        .rpc_id = state(m).rpc_id,
                        .aux = 0,
                        .status = 0};
  Op* header_op = nullptr;
  if (Result r = engine().sender_.pack(p, announcement, static_cast<std::uint32_t>(payload.size()), &header_op);
      r != Result::kOk)
    return r;
  Op* payload_op = engine().ops_.take(OpKind::kSendPayload, p.id());
  if (Result r = engine().sender_.prepare_payload(payload_op, payload, copy); r != Result::kOk) {
    engine().ops_.give(header_op);
    engine().ops_.give(payload_op);
    return r;
  }
  answered(p, m, false, 0);
  if (copy == PayloadCopy::kNo && memh != nullptr) payload_op->send.payload_memh = memh;
  payload_op->send.on_done = std::move(on_done);
  payload_op->send.ends_reply = state(m).in_window;
  payload_op->send.tag = wire::make_tag(wire::kReply, p.remote_index(), state(m).rpc_id);
  if (last_out != nullptr) *last_out = payload_op;
  return engine().sender_.enqueue(p, header_op, payload_op);
}

Result RpcServer::reply_own(Message& m, std::span<const std::byte> header, SendCallback&& on_done) {
  if (!state(m).request || state(m).replied) [[unlikely]]
    return not_answerable(m);
  std::span<const std::byte> payload = state(m).payload;
  if (state(m).reply_buf || header.size() + payload.size() > engine().eager_limit_) [[unlikely]]
    return reply_own_held(m, header, std::move(on_done));
  // Packed into the reply at once (inline or eager): nothing to hold, and moving a Message
  // that borrows a coalesced receive would copy its bytes first.
  if (header.size() > kMaxUserHeader) [[unlikely]]
    return engine().guard_.invalid(absl::StrFormat("reply to method %d: header of %u bytes (at most %u)",
                                                   state(m).handler, header.size(), kMaxUserHeader));
  PeerData& p = engine().peers_.at(state(m).peer);
  Result r;
  if (p.epoch() == state(m).epoch && p.state() == PeerState::kReady) [[likely]] {
    // The request's receive slot is released right after the reply is packed, so the reply
    // itself carries its credit: a caller with as many calls in flight as credits gets its
    // next call's credit with this reply, not one reply later.
    if (state(m).credit) [[likely]] {
      state(m).credit = false;
      Delivery::credit_freed(p);
    }
    // reply()'s checks, passed: the peer is live, the header within bounds, no reply
    // buffer; the payload, within the eager limit, only against SLUICE_MAX_MESSAGE.
    if (payload.size() > engine().config_.max_message) [[unlikely]]
      r = too_large(m, p, header.size(), payload.size());
    else
      r = send_reply(p, m, wire::kFlagReply, header, payload, 0, PayloadCopy::kNo, std::move(on_done), nullptr,
                     nullptr);
  } else {
    r = reply(m, header, payload, 0, PayloadCopy::kNo, std::move(on_done), nullptr, nullptr);
  }
  engine().delivery_.release(m);              // valid: answering() checked it (Message::release's test)
  engine().control_.maybe_return_credits(p);  // a queued reply carries it later
  return r;
}

Result RpcServer::reply_own_held(Message& m, std::span<const std::byte> header, SendCallback&& on_done) {
  Message held = std::move(m);  // the request's memory; the handler's Message is left empty
  Op* last = nullptr;
  Result r = reply(held, header, state(held).payload, 0, PayloadCopy::kNo, std::move(on_done), nullptr, &last);
  // Sent by rendezvous from that memory: it stays until the send completes (free_op). Inline
  // or eager, the payload is packed already, and `held` goes now.
  if (r == Result::kOk && last != nullptr && last->kind == OpKind::kSendPayload) last->pending = std::move(held);
  return r;
}

}  // namespace sluice::detail
