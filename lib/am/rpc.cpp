// RPC: calls with deadlines and cancellation, replies into caller buffers, slot tables.
#include <cstring>
#include <exception>

#include <absl/strings/str_format.h>

#include "am/engine_core.h"
#include "am/invoke.h"
#include "am/send_now.h"
#include "core/log.h"

namespace sluice::detail {

Result EngineCore::call(PeerData& p, HandlerId method, std::span<const std::byte> header,
                        std::span<const std::byte> payload, const CallOptions& options, ReplyCallback&& cb,
                        CallId* id_out, PayloadCopy copy) {
  if (p.state == PeerState::kDead) return Result::kUnavailable;
  if (!cb) SLUICE_INVALID("call(method %d) to %s: no reply callback", method, p.name);
  if (header.size() > kMaxUserHeader || payload.size() > config_.max_message)
    SLUICE_INVALID(
        "call(method %d) to %s: header of %u bytes (at most %u) or payload of %u (at most %u, SLUICE_MAX_MESSAGE)",
        method, p.name, header.size(), kMaxUserHeader, payload.size(), config_.max_message);
  if (p.tx.queued + p.rpc.call_queue.size() >= config_.send_queue_max) {
    c_.would_block->add();
    return Result::kWouldBlock;
  }
  auto [id, cp] = calls_.insert();
  if (cp == nullptr) [[unlikely]] {  // a million calls outstanding: wait for some to finish
    c_.would_block->add();
    return Result::kWouldBlock;
  }
  std::uint8_t flags = wire::kFlagRequest;
  if (!options.reply_buffer.empty()) flags |= wire::kFlagReplyBuf;
  Outgoing out{.flags = flags,
               .handler = method,
               .header = header,
               .payload = payload,
               .rpc_id = id,
               .aux = options.reply_buffer.size(),
               .status = 0};
  Op* hop = nullptr;
  Op* pop = nullptr;
  bool fragmented = false;
  // A small request leaves at once when nothing waits for a slot or a credit (a reply buffer's
  // receive is posted before its request leaves, so those take the ordinary path).
  bool sent = options.reply_buffer.empty() && p.rpc.call_queue.empty() && p.rpc.calls_outstanding < p.rpc.slots &&
              send_inline(p, out);
  Result r = Result::kOk;
  if (sent) {
    ++p.rpc.calls_outstanding;
  } else if (header.size() + payload.size() <= eager_limit_ || config_.rndv) {
    r = pack_message(p, out, copy, &hop, &pop);
  } else {
    // Bounce mode: the pieces go out at once, so the slot limit is honoured here. A piece's
    // aux is its offset, so a large request cannot also announce a reply buffer's capacity.
    if (!options.reply_buffer.empty()) {
      calls_.erase(id);
      SLUICE_INVALID(
          "call(method %d) to %s: a %u-byte request above the eager limit cannot also give a reply "
          "buffer in bounce mode (SLUICE_RNDV=n)",
          method, p.name, header.size() + payload.size());
    }
    if (p.state != PeerState::kReady || p.rpc.calls_outstanding >= p.rpc.slots) {
      if (p.state == PeerState::kNew) start_handshake(p);
      calls_.erase(id);
      return Result::kWouldBlock;
    }
    fragmented = true;
    r = Result::kOk;
  }
  if (r != Result::kOk) {
    calls_.erase(id);
    return r;
  }
  Call& c = *cp;
  c.peer = p.id;
  c.on_reply = std::move(cb);
  c.method = method;
  if (options.timeout == kInfinite) [[likely]] {
    c.deadline = Clock::time_point::max();
    c.warn_at = config_.call_warn == kInfinite ? Clock::time_point::max() : now_ + config_.call_warn;
  } else {
    c.deadline = Clock::now() + options.timeout;
    c.warn_at = Clock::time_point::max();
  }
  if ((++p.traffic.sampler & 63) == 0) [[unlikely]]
    c.started = Clock::now();
  if (!options.reply_buffer.empty()) {
    // The exact receive for the reply payload is posted before the request leaves.
    c.landing = std::make_unique<ReplyLanding>();
    c.landing->buffer = options.reply_buffer;
    Op* rx = new_op(OpKind::kReplyRx, p.id);
    rx->recv.call_id = id;
    rx->incarnation = p.epoch;
    c.reply_rx = rx;
    ++exact_posted_;
    PostResult pr = worker_->post_recv(p.ep, rx, options.reply_buffer.data(), options.reply_buffer.size(),
                                       wire::make_tag(wire::kReply, p.id, id), kFullMask, nullptr);
    if (pr.kind != Post::kPending) done_.push_back({rx, pr.code, pr.length, pr.sender_tag});
  }
  c_.rpc_calls->add();
  if (id_out) *id_out = id;
  if (sent) return Result::kOk;
  if (fragmented) {
    ++p.rpc.calls_outstanding;
    return send_fragmented(p, out, SendCallback());
  }
  if (p.state == PeerState::kReady && p.rpc.call_queue.empty() && p.rpc.calls_outstanding < p.rpc.slots) {
    ++p.rpc.calls_outstanding;
    return enqueue(p, hop, pop);
  }
  if (p.state == PeerState::kNew) start_handshake(p);
  p.rpc.call_queue.push_back({hop, pop});
  return Result::kOk;
}

void EngineCore::release_call_slot(PeerData& p) {
  if (p.rpc.calls_outstanding > 0) --p.rpc.calls_outstanding;
  if (p.has_waiting()) flush(p);  // a request waiting for this slot may go now
}

void EngineCore::on_request(PeerData& p, Message& m) {
  if (!p.rpc.server_slots.try_acquire()) [[unlikely]] {
    // Beyond the slots granted: refused before any work is done.
    c_.rpc_slot_refused->add();
    SLUICE_LOG_RATE_LIMITED(kWarn, "rpc", "%s exceeded its %u rpc slots; request refused", p.name,
                            p.rpc.server_slots.capacity());
    std::string why =
        absl::StrFormat("the client exceeded the %u RPC slots the server granted it", p.rpc.server_slots.capacity());
    (void)reply(m, {}, std::as_bytes(std::span(why)), static_cast<std::uint16_t>(absl::StatusCode::kResourceExhausted));
    return;
  }
  m.s_.holds_rpc_slot = true;
  switch (invoke_handler(m)) {
    case Invoke::kDone: break;
    case Invoke::kNoHandler: {
      std::string why = absl::StrFormat("no method %d is registered on the server", m.s_.handler);
      (void)reply(m, {}, std::as_bytes(std::span(why)), static_cast<std::uint16_t>(absl::StatusCode::kUnimplemented));
      break;
    }
    case Invoke::kThrew:
      // The caller learns why; the server goes on.
      if (m.valid() && !m.s_.replied) {
        std::string what = std::move(handler_error_);
        what.resize(std::min<std::size_t>(what.size(), 512));
        (void)reply(m, {}, std::as_bytes(std::span(what)), static_cast<std::uint16_t>(absl::StatusCode::kInternal));
      }
      break;
  }
}

Result EngineCore::not_answerable(const Message& m) {
  if (!m.s_.request)
    SLUICE_INVALID("reply to handler %d's message: it is not a request (no call waits for a reply)", m.s_.handler);
  SLUICE_INVALID("reply to method %d's request: it was answered already", m.s_.handler);
}

Result EngineCore::reply(Message& m, std::span<const std::byte> header, std::span<const std::byte> payload,
                         std::uint16_t status, PayloadCopy copy, SendCallback&& on_done, void* memh, Op** last_out) {
  if (!m.s_.request || m.s_.replied) [[unlikely]]
    return not_answerable(m);
  PeerData& p = *peers_[m.s_.peer];
  if (p.state == PeerState::kDead || p.epoch != m.s_.incarnation) {
    m.s_.replied = true;
    return Result::kUnavailable;
  }
  if (header.size() > kMaxUserHeader || payload.size() > config_.max_message)
    SLUICE_INVALID(
        "reply to method %d from %s: header of %u bytes (at most %u) or payload of %u (at most %u, "
        "SLUICE_MAX_MESSAGE)",
        m.s_.handler, p.name, header.size(), kMaxUserHeader, payload.size(), config_.max_message);
  std::uint8_t flags = wire::kFlagReply;
  Op* hop = nullptr;
  Op* pop = nullptr;
  Result r;
  // The reply is handed over: its slot is free for the caller's next request (the reply's own
  // send, when not complete already, is counted until it completes: SlotTable).
  auto answered = [&](bool sent) {
    m.s_.replied = true;
    if (m.s_.holds_rpc_slot) {
      if (sent) p.rpc.server_slots.release();
      else p.rpc.server_slots.answer();
    }
    c_.rpc_replies->add();
  };
  std::string too_large;  // the error's text, when it is one (lives until the reply is packed)
  if (m.s_.reply_buf && status == 0) {
    if (payload.size() > m.s_.reply_capacity) {
      status = static_cast<std::uint16_t>(absl::StatusCode::kOutOfRange);
      too_large = absl::StrFormat("the reply's %u-byte payload does not fit the call's %u-byte reply_buffer",
                                  payload.size(), m.s_.reply_capacity);
      header = {};
      payload = std::as_bytes(std::span(too_large));
    }
  }
  if (m.s_.reply_buf && status == 0 && !payload.empty()) {
    // Straight into the buffer the caller posted: exact tag on the call id.
    Outgoing announcement{.flags = static_cast<std::uint8_t>(flags | wire::kFlagRndv | wire::kFlagReplyBuf),
                          .handler = m.s_.handler,
                          .header = header,
                          .payload = {},
                          .rpc_id = m.s_.rpc_id,
                          .aux = 0,
                          .status = status};
    r = pack(p, announcement, static_cast<std::uint32_t>(payload.size()), &hop);
    if (r != Result::kOk) return r;
    pop = new_op(OpKind::kSendPayload, p.id);
    r = prepare_payload(pop, payload, copy);
    if (r != Result::kOk) {
      free_op(hop);
      free_op(pop);
      return r;
    }
    answered(false);
    if (copy == PayloadCopy::kNo && memh != nullptr) pop->send.payload_memh = memh;
    pop->send.on_done = std::move(on_done);
    pop->send.releases_rpc_slot = m.s_.holds_rpc_slot;
    pop->send.tag = wire::make_tag(wire::kReply, p.remote_slot, m.s_.rpc_id);
    if (last_out != nullptr) *last_out = pop;
    return enqueue(p, hop, pop);
  }
  if (m.s_.reply_buf && status == 0) flags |= wire::kFlagReplyBuf;
  Outgoing out{.flags = flags,
               .handler = m.s_.handler,
               .header = header,
               .payload = payload,
               .rpc_id = m.s_.rpc_id,
               .aux = 0,
               .status = status};
  if (send_inline(p, out)) [[likely]] {
    answered(true);  // its send is complete already
    complete_inline(p.id, std::move(on_done));
    return Result::kOk;
  }
  if (header.size() + payload.size() <= eager_limit_ || config_.rndv) {
    r = pack_message(p, out, copy, &hop, &pop);
  } else {
    answered(false);
    return send_fragmented(p, out, std::move(on_done), m.s_.holds_rpc_slot);
  }
  if (r != Result::kOk) return r;
  answered(false);
  if (pop != nullptr && copy == PayloadCopy::kNo && memh != nullptr) pop->send.payload_memh = memh;
  Op* last = pop ? pop : hop;
  last->send.on_done = std::move(on_done);
  last->send.releases_rpc_slot = m.s_.holds_rpc_slot;
  if (last_out != nullptr) *last_out = last;
  return enqueue(p, hop, pop);
}

Result EngineCore::reply_own(Message& m, std::span<const std::byte> header, SendCallback&& on_done) {
  if (!m.s_.request || m.s_.replied) [[unlikely]]
    return not_answerable(m);
  if (!m.s_.reply_buf && header.size() + m.s_.payload.size() <= eager_limit_) [[likely]] {
    // Packed into the reply at once (inline or eager): nothing to hold, and moving a Message
    // that borrows a coalesced receive would copy its bytes first.
    if (header.size() > kMaxUserHeader)
      SLUICE_INVALID("reply to method %d: header of %u bytes (at most %u)", m.s_.handler, header.size(),
                     kMaxUserHeader);
    // The request's receive slot is released right after the reply is packed, so the reply
    // itself carries its credit: a caller with as many calls in flight as credits gets its
    // next call's credit with this reply, not one reply later.
    PeerData& p = *peers_[m.s_.peer];
    if (m.s_.credit && p.epoch == m.s_.incarnation && p.state == PeerState::kReady) [[likely]] {
      m.s_.credit = false;
      --p.rx.unreleased;
      p.rx.owed.released();
    }
    Result r = reply(m, header, m.s_.payload, 0, PayloadCopy::kNo, std::move(on_done), nullptr, nullptr);
    m.release();
    maybe_return_credits(p);  // a queued reply carries it later
    return r;
  }
  Message held = std::move(m);  // the request's memory; the handler's Message is left empty
  Op* last = nullptr;
  Result r = reply(held, header, held.s_.payload, 0, PayloadCopy::kNo, std::move(on_done), nullptr, &last);
  // Sent by rendezvous from that memory: it stays until the send completes (free_op). Inline
  // or eager, the payload is packed already, and `held` goes now.
  if (r == Result::kOk && last != nullptr && last->kind == OpKind::kSendPayload) last->pending = std::move(held);
  return r;
}

void EngineCore::on_reply(PeerData& p, Message& m, const wire::Header&) {
  release_call_slot(p);
  Call* found = calls_.find(m.s_.rpc_id);
  if (found == nullptr || found->finishing) {
    c_.rpc_late_replies->add();
    SLUICE_LOG_RATE_LIMITED(kInfo, "rpc", "late reply from %s for call %u discarded", p.name, m.s_.rpc_id);
    return;
  }
  Call& c = *found;
  if (c.started != Clock::time_point{}) [[unlikely]]
    p.traffic.sample_rtt(Clock::now() - c.started);
  absl::StatusCode code = code_from_wire(m.s_.status);
  if (code != absl::StatusCode::kOk) {
    std::string text = absl::StrFormat("%s answered call %u of method %d with %s", p.name, m.s_.rpc_id, c.method,
                                       absl::StatusCodeToString(code));
    if (!m.s_.payload.empty())
      text.append(": ").append(reinterpret_cast<const char*>(m.s_.payload.data()), m.s_.payload.size());
    finish_call(m.s_.rpc_id, absl::Status(code, text));
    return;
  }
  if (m.s_.reply_buf) {
    CallId id = m.s_.rpc_id;
    if (c.landing == nullptr || m.s_.announced > c.landing->buffer.size()) [[unlikely]] {
      // A reply into a buffer the call did not give (or larger than it): the peer broke the
      // protocol. The call fails now rather than wait for a payload that has nowhere to land.
      c_.parse_errors->add();
      finish_call(id, absl::InternalError(absl::StrFormat(
                          "%s answered call %u into a reply buffer it did not have room for", p.name, id)));
      return;
    }
    ReplyLanding& l = *c.landing;
    l.header_arrived = true;
    l.payload_len = m.s_.announced;
    l.reply = std::move(m);
    if (l.payload_len == 0 || l.payload_landed) {
      l.reply.s_.payload = l.buffer.first(l.payload_len);
      finish_call(id, absl::OkStatus());
    }
    return;
  }
  if (c.reply_rx == nullptr) [[likely]] {
    // Complete as it arrived: the callback gets this message (no moves through the call).
    ReplyCallback cb = std::move(c.on_reply);
    calls_.erase(m.s_.rpc_id);
    cb(absl::OkStatus(), m);
    return;
  }
  // A reply to a call with a reply buffer (landing exists), not sent into it (an error
  // status, or a reply the server packed whole): the buffer's receive is cancelled first.
  CallId id = m.s_.rpc_id;
  c.landing->reply = std::move(m);
  finish_call(id, absl::OkStatus());
}

void EngineCore::on_reply_rx_done(Op* op, absl::StatusCode code, std::size_t length) {
  --exact_posted_;
  CallId id = op->recv.call_id;
  free_op(op);
  Call* found = calls_.find(id);
  if (found == nullptr) return;
  Call& c = *found;
  c.reply_rx = nullptr;
  ReplyLanding& l = *c.landing;  // a call with a posted reply receive has one
  if (c.finishing) {
    finish_call(id, l.final_status);
    return;
  }
  if (code != absl::StatusCode::kOk) {
    finish_call(
        id, absl::Status(code == absl::StatusCode::kOutOfRange ? code : absl::StatusCode::kUnavailable,
                         absl::StrFormat("reply payload of call %u failed: %s", id, absl::StatusCodeToString(code))));
    return;
  }
  l.payload_landed = true;
  l.payload_len = length;
  if (peers_[c.peer]) count_received(*peers_[c.peer], 0, length);
  if (l.header_arrived) {
    l.reply.s_.payload = l.buffer.first(length);
    finish_call(id, absl::OkStatus());
  }
}

void EngineCore::finish_call(CallId id, absl::Status status) {
  Call* found = calls_.find(id);
  if (found == nullptr) return;
  Call& c = *found;
  if (c.reply_rx != nullptr) {
    // The transport may still write into the caller's buffer: complete once it cannot.
    c.finishing = true;
    c.landing->final_status = status;
    worker_->cancel(c.reply_rx);
    return;
  }
  ReplyCallback cb = std::move(c.on_reply);
  Message reply = c.landing ? std::move(c.landing->reply) : Message();
  calls_.erase(id);
  if (!status.ok()) reply = Message();
  cb(status, reply);
}

void EngineCore::expire_calls(Clock::time_point now) {
  auto due = [&](const Call& c) { return !c.finishing && (c.deadline <= now || c.warn_at <= now); };
  for (CallId id : calls_.ids_where(due)) {
    Call& c = *calls_.find(id);
    const char* peer = peers_[c.peer] ? peers_[c.peer]->name.c_str() : "a gone peer";
    if (c.deadline <= now) {
      c_.rpc_deadline->add();
      finish_call(id, absl::DeadlineExceededError(
                          absl::StrFormat("call %u of method %d to %s passed its deadline", id, c.method, peer)));
      continue;
    }
    auto age = std::chrono::duration_cast<std::chrono::milliseconds>(now - (c.warn_at - config_.call_warn));
    c.warn_at = Clock::time_point::max();
    c_.rpc_overdue->add();
    SLUICE_LOG_RATE_LIMITED(kWarn, "rpc",
                            "call %u of method %d to %s has waited %s for its reply, without a timeout; it goes on "
                            "waiting (SLUICE_CALL_WARN=%s; CallOptions::timeout or Engine::cancel end it)",
                            id, c.method, peer, format_duration(age), format_duration(config_.call_warn));
  }
}

void EngineCore::cancel(CallId id) {
  Call* found = calls_.find(id);
  if (found == nullptr || found->finishing) return;
  c_.rpc_cancelled->add();
  finish_call(id, absl::CancelledError(absl::StrFormat("call %u cancelled", id)));
}

}  // namespace sluice::detail
