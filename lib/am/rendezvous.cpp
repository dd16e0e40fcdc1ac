// Large payloads arriving: landings (the handler's sink or the receive budget), payloads
// waiting for receive memory, rendezvous completion, bounce-mode reassembly.

#include <absl/strings/str_format.h>

#include "am/engine_core.h"
#include "core/copy.h"
#include "core/log.h"

namespace sluice::detail {

std::span<std::byte> EngineCore::sink_landing(Message& m, std::size_t size) {
  if (m.s_.handler >= kMaxHandlers || m.s_.reply_flag) return {};
  HandlerEntry& he = handlers_[m.s_.handler];
  if (!he.options.sink) return {};
  std::span<std::byte> dest = he.options.sink(m, size);
  if (dest.size() >= size) {
    m.s_.sink_landing = true;  // the handler gets it, or sink_release does (release())
    return dest.first(size);
  }
  if (!dest.empty()) {
    SLUICE_LOG_RATE_LIMITED(kWarn, "am",
                            "handler %d's sink gave %u bytes for a %u-byte payload; using the receive pool",
                            m.s_.handler, dest.size(), size);
  }
  return {};
}

std::span<std::byte> EngineCore::pool_landing(PeerData& p, Message& m, std::size_t size, bool frag) {
  if (recv_pool_->try_take_landing(size, &m.s_.landing) == Result::kOk) [[likely]]
    return std::span(slot_data(m.s_.landing), size);
  if (!recv_pool_->can_ever_land(size)) {
    std::string why = absl::StrFormat(
        "a %u-byte payload, which SLUICE_RECV_POOL_MAX=%s can never hold (%u bytes beside its reservations); "
        "no sink took it",
        size, format_size(recv_pool_->budget().max), recv_pool_->landing_room());
    // Bounce-mode pieces cannot be taken back one by one: there the peer fails.
    if (frag) fail_peer(p, absl::StatusCode::kResourceExhausted, "announced " + why);
    else decline_landing(p, m, why);
  }
  return {};
}

std::span<std::byte> EngineCore::landing_for(PeerData& p, Message& m, std::size_t size, bool frag) {
  std::span<std::byte> dest = sink_landing(m, size);
  // Pool memory goes to waiting landings first, oldest first.
  if (dest.empty() && parked_.empty()) dest = pool_landing(p, m, size, frag);
  return dest;
}

void EngineCore::decline_landing(PeerData& p, Message& m, const std::string& why) {
  // The message fails, not its peer. The sender learns why (a request by its reply, a message
  // by DECLINE, and its send completes with ResourceExhausted; a reply fails its call here),
  // and the payload is taken and dropped: a receive of no bytes ends the sender's transfer.
  SLUICE_LOG_RATE_LIMITED(kWarn, "am", "%s: refused a message for handler %d: %s", p.name, m.s_.handler, why);
  if (m.s_.request) {
    rpc_server_.answer_error(m, absl::StatusCode::kResourceExhausted, why);
    discard_payload(p, m.s_.seq);
  } else if (m.s_.reply_flag) {
    rpc_client_.reply_declined(p, m.s_.rpc_id, why);
    discard_payload(p, m.s_.seq);
  } else {
    // Dropped only once the sender has answered: its send must learn of the refusal before
    // the transfer can end (DECLINE, docs/wire-protocol.md).
    p.tx.declines.push_back({m.s_.seq, why.substr(0, wire::kReasonMax)});
    send_declines(p);
  }
  release(m);  // its credit goes back
}

void EngineCore::discard_payload(PeerData& p, std::uint64_t seq) {
  if (p.state == PeerState::kDead || !p.ep.valid()) return;
  Op* op = new_op(OpKind::kRndvRx, p.id);
  op->incarnation = p.epoch;
  op->recv.discard = true;
  ++exact_posted_;
  PostResult r = worker_->post_recv(p.ep, op, nullptr, 0, wire::make_tag(wire::kRndv, p.id, seq), kFullMask, nullptr);
  if (r.kind != Post::kPending) done_.push_back({op, r.code, r.length, r.sender_tag});
}

void EngineCore::send_declines(PeerData& p) {
  // One DECLINE in flight per peer (control messages have a buffer each); the next when it is sent.
  if (p.tx.declines.empty() || p.tx.ctrl_busy[wire::kDecline] || p.state != PeerState::kReady) return;
  const auto& [seq, why] = p.tx.declines.front();
  send_ctrl(p, wire::kDecline, std::as_bytes(std::span(why)), seq);
  if (p.tx.ctrl_busy[wire::kDecline]) p.tx.declines.pop_front();
}

void EngineCore::on_decline(PeerData& p, const wire::Header& h, std::span<const std::byte> body) {
  if (body.empty()) {  // the sender's answer to ours: its send knows, the payload can go
    discard_payload(p, h.aux);
    return;
  }
  std::string why(reinterpret_cast<const char*>(body.data()), body.size());
  bool found = false;
  for (auto& op : ops_) {
    if (op.in_use && op.kind == OpKind::kSendPayload && op.peer == p.id && op.incarnation == p.epoch &&
        wire::tag_class(op.send.tag) == wire::kRndv && wire::tag_id(op.send.tag) == (h.aux & wire::kIdMask)) {
      op.send.declined = why;  // its completion reports it
      found = true;
      break;
    }
  }
  if (!found)
    SLUICE_LOG_RATE_LIMITED(kWarn, "am", "%s refused message %u, whose send is not in flight: %s", p.name, h.aux, why);
  p.tx.declines.push_back({h.aux, std::string()});
  send_declines(p);
}

void EngineCore::start_rndv(PeerData& p, Message&& m, const wire::Header& h, bool ordered) {
  std::size_t size = h.payload_len;
  if (size > config_.max_message) {
    fail_peer(p, absl::StatusCode::kInvalidArgument,
              absl::StrFormat("announced a %u-byte payload, above SLUICE_MAX_MESSAGE=%s", size,
                              format_size(config_.max_message)));
    return;
  }
  std::span<std::byte> dest = landing_for(p, m, size, false);
  if (!dest.empty()) post_landing(p, std::move(m), dest, ordered);
  else if (p.state != PeerState::kDead && m.valid()) park_landing(p, std::move(m), h, ordered);
}

void EngineCore::post_landing(PeerData& p, Message&& m, std::span<std::byte> dest, bool ordered) {
  m.s_.payload = dest;
  Op* op = new_op(OpKind::kRndvRx, p.id);
  op->incarnation = p.epoch;
  op->recv.ordered = ordered;
  std::uint64_t tag = wire::make_tag(wire::kRndv, p.id, m.s_.seq);
  void* memh = m.s_.landing ? slot_memh(m.s_.landing) : nullptr;
  op->pending = std::move(m);
  free_announcement(p, op->pending);
  if (ordered) p.rx.blocked = true;
  ++p.rx.landing;
  ++exact_posted_;
  PostResult r = worker_->post_recv(p.ep, op, dest.data(), dest.size(), tag, kFullMask, memh);
  if (r.kind != Post::kPending) done_.push_back({op, r.code, r.length, r.sender_tag});
  fault_.pass(FaultPoint::kRndvLand);
}

void EngineCore::free_announcement(PeerData& p, Message& m) {
  // The payload has memory to land in (the receive budget's or a sink's), so the announcement
  // needs no receive slot: its credit goes back now, and the sender's next message does not wait
  // for this payload, its handler and a reply. A parked announcement keeps its credit, which
  // bounds how many can wait.
  std::size_t hl = m.s_.header.size();
  std::unique_ptr<std::byte[]> copy;
  if (hl != 0) {
    copy.reset(new std::byte[hl]);
    std::memcpy(copy.get(), m.s_.header.data(), hl);
  }
  m.s_.slot.release();
  m.s_.heap = std::move(copy);
  m.s_.header = std::span<const std::byte>(m.s_.heap.get(), hl);
  if (m.s_.credit) {
    m.s_.credit = false;
    return_credit(p, m.s_.incarnation);
  }
}

void EngineCore::park_landing(PeerData& p, Message&& m, const wire::Header& h, bool ordered) {
  c_.landing_waits->add();
  const Budget& b = recv_pool_->budget();
  SLUICE_LOG_RATE_LIMITED(kWarn, "am",
                          "%s: a %u-byte payload waits for receive memory: %s of SLUICE_RECV_POOL_MAX=%s "
                          "held by messages not yet released; it lands when some are (am.landing_waits)",
                          p.name, h.payload_len, format_size(b.held_bytes), format_size(b.max));
  if (ordered) p.rx.blocked = true;
  ++p.rx.parked;
  parked_.push_back({p.id, std::move(m), h, ordered});
  parked_at_returns_ = recv_pool_->returns();
}

void EngineCore::retry_landings() {
  parked_at_returns_ = recv_pool_->returns();
  while (!parked_.empty()) {
    ParkedLanding& w = parked_.front();
    PeerData& p = *peers_[w.peer];
    bool frag = (w.header.flags & wire::kFlagFrag) != 0;
    std::span<std::byte> dest = pool_landing(p, w.message, w.header.payload_len, frag);
    if (dest.empty() && w.message.valid() && p.state != PeerState::kDead) return;  // oldest first: the rest wait
    ParkedLanding go = std::move(w);
    parked_.pop_front();
    if (dest.empty()) {  // refused (its peer goes on) or its peer failed (parked_ is cleared of it)
      if (p.state == PeerState::kDead) continue;
      --p.rx.parked;
      if (go.ordered) p.rx.blocked = false;
      deliver(p);
      continue;
    }
    --p.rx.parked;
    if (go.header.flags & wire::kFlagFrag) {
      start_fragments(p, std::move(go.message), dest);
      p.rx.blocked = false;
      deliver(p);
    } else {
      post_landing(p, std::move(go.message), dest, go.ordered);
    }
  }
}

void EngineCore::drop_parked(PeerData& p) {
  std::erase_if(parked_, [&](const ParkedLanding& w) { return w.peer == p.id; });
  p.rx.parked = 0;
}

void EngineCore::on_rndv_done(Op* op, absl::StatusCode code, std::size_t length) {
  --exact_posted_;
  if (op->recv.discard) {  // a refused payload, taken and dropped (decline_landing)
    free_op(op);
    return;
  }
  PeerData& p = *peers_[op->peer];
  Message m = std::move(op->pending);
  bool stale = op->incarnation != p.epoch;
  bool ordered = op->recv.ordered;
  free_op(op);
  if (stale) return;  // a partial payload never reaches a handler
  if (ordered) p.rx.blocked = false;
  --p.rx.landing;
  if (code != absl::StatusCode::kOk || length != m.s_.payload.size()) {
    SLUICE_LOG_RATE_LIMITED(kWarn, "am", "%s: rendezvous payload of %u bytes failed: %s, %u bytes landed", p.name,
                            m.s_.payload.size(), absl::StatusCodeToString(code), length);
    if (m.s_.credit) {  // returned already when the landing was posted (free_announcement)
      m.s_.credit = false;
      --p.rx.unreleased;
    }
    if (p.state != PeerState::kDead && code != absl::StatusCode::kCancelled)
      transfer_failed(p, absl::StrFormat("rendezvous payload failed: %s", absl::StatusCodeToString(code)));
    return;
  }
  c_.rndv_received->add();
  count_received(p, 0, length);  // the payload; its announcement was counted as a message
  finish_incoming(p, m);
  m = Message();
  deliver(p);
}

void EngineCore::assemble_fragment(PeerData& p, Message&& m, const wire::Header& h) {
  if (h.aux == 0) {
    if (p.rx.frag.valid()) {
      c_.parse_errors->add();
      p.rx.frag = Message();
    }
    std::span<std::byte> dest = landing_for(p, m, h.payload_len, true);
    if (!dest.empty()) start_fragments(p, std::move(m), dest);
    else if (p.state != PeerState::kDead) park_landing(p, std::move(m), h, /*ordered=*/true);
    return;
  }
  // A later piece is only bytes: the first piece stands for the message (its request, its
  // reply), and this one's slot and credit go back once it is copied.
  m.s_.request = false;
  m.s_.reply_flag = false;
  std::size_t piece = m.s_.payload.size();
  if (!p.rx.frag.valid() || h.aux != p.rx.frag_received || h.payload_len != p.rx.frag.s_.payload.size()) {
    c_.parse_errors->add();
    SLUICE_LOG_RATE_LIMITED(kWarn, "am", "%s: fragment at %u out of place", p.name, h.aux);
    return;
  }
  copy_payload(p.rx.frag.s_.payload.data() + h.aux, m.s_.payload.data(), piece);
  add_fragment(p, piece);
}

void EngineCore::start_fragments(PeerData& p, Message&& m, std::span<std::byte> dest) {
  std::size_t piece = m.s_.payload.size();
  copy_payload(dest.data(), m.s_.payload.data(), piece);
  m.s_.payload = dest;
  p.rx.frag = std::move(m);
  p.rx.frag_received = 0;
  add_fragment(p, piece);
}

void EngineCore::add_fragment(PeerData& p, std::size_t piece) {
  c_.bounce_bytes->add(piece);
  p.rx.frag_received += piece;
  if (p.rx.frag_received == p.rx.frag.s_.payload.size()) {
    Message done = std::move(p.rx.frag);
    p.rx.frag_received = 0;
    finish_incoming(p, done);
  }
}

}  // namespace sluice::detail
