// Large payloads arriving: landings (the handler's sink or the receive budget), payloads
// waiting for receive memory, rendezvous completion, bounce-mode reassembly.

#include <absl/strings/str_format.h>

#include "am/landings.h"

#include "am/engine_core.h"
#include "core/copy.h"
#include "core/log.h"

namespace sluice::detail {

std::span<std::byte> Landings::sink_landing(Message& m, std::size_t size) {
  const HandlerOptions* options = engine().handlers_.options(state(m).handler);
  if (options == nullptr || state(m).reply_flag || !options->sink) return {};
  std::span<std::byte> dest = options->sink(m, size);
  if (dest.size() >= size) {
    state(m).sink_landing = true;  // the handler gets it, or sink_release does (release())
    return dest.first(size);
  }
  if (!dest.empty()) {
    SLUICE_LOG_RATE_LIMITED(kWarn, "am",
                            "handler %d's sink gave %u bytes for a %u-byte payload; using the receive pool",
                            state(m).handler, dest.size(), size);
  }
  return {};
}

std::span<std::byte> Landings::pool_landing(PeerData& p, Message& m, std::size_t size, bool frag) {
  if (engine().recv_pool_->try_take_landing(size, &state(m).landing) == Result::kOk) [[likely]]
    return std::span(slot_data(state(m).landing), size);
  if (!engine().recv_pool_->can_ever_land(size)) {
    std::string why = absl::StrFormat(
        "a %u-byte payload, which SLUICE_RECV_POOL_MAX=%s can never hold (%u bytes beside its reservations); "
        "no sink took it",
        size, format_size(engine().recv_pool_->budget().max), engine().recv_pool_->landing_room());
    // Bounce-mode pieces cannot be taken back one by one: there the peer fails.
    if (frag) engine().fail_peer(p, absl::StatusCode::kResourceExhausted, "announced " + why);
    else decline_landing(p, m, why);
  }
  return {};
}

std::span<std::byte> Landings::landing_for(PeerData& p, Message& m, std::size_t size, bool frag) {
  std::span<std::byte> dest = sink_landing(m, size);
  // Pool memory goes to waiting landings first, oldest first.
  if (dest.empty() && parked_.empty()) dest = pool_landing(p, m, size, frag);
  return dest;
}

void Landings::decline_landing(PeerData& p, Message& m, const std::string& why) {
  // The message fails, not its peer. The sender learns why (a request by its reply, a message
  // by DECLINE, and its send completes with ResourceExhausted; a reply fails its call here),
  // and the payload is taken and dropped: a receive of no bytes ends the sender's transfer.
  SLUICE_LOG_RATE_LIMITED(kWarn, "am", "%s: refused a message for handler %d: %s", p.name(), state(m).handler, why);
  if (state(m).request) {
    engine().rpc_server_.answer_error(m, absl::StatusCode::kResourceExhausted, why);
    discard_payload(p, state(m).seq);
  } else if (state(m).reply_flag) {
    engine().rpc_client_.reply_declined(p, state(m).rpc_id, why);
    discard_payload(p, state(m).seq);
  } else {
    // Dropped only once the sender has answered: its send must learn of the refusal before
    // the transfer can end (DECLINE, docs/wire-protocol.md).
    p.landings.declines_.push_back({state(m).seq, why.substr(0, wire::kReasonMax)});
    send_declines(p);
  }
  engine().delivery_.release(m);  // its credit goes back
}

void Landings::discard_payload(PeerData& p, std::uint64_t seq) {
  if (p.state() == PeerState::kDead || !p.ep().valid()) return;
  Op* op = engine().ops_.take(OpKind::kRndvRx, p.id());
  op->epoch = p.epoch();
  op->recv.discard = true;
  ++engine().exact_posted_;
  PostResult r =
      engine().worker_->post_recv(p.ep(), op, nullptr, 0, wire::make_tag(wire::kRndv, p.id(), seq), kFullMask, nullptr);
  if (r.kind != Post::kPending) engine().done_.push_back({op, r.code, r.length, r.sender_tag});
}

void Landings::send_declines(PeerData& p) {
  // One DECLINE in flight per peer (control messages have a buffer each); the next when it is sent.
  if (p.landings.declines_.empty() || p.ctrl.busy(wire::kDecline) || p.state() != PeerState::kReady) return;
  const auto& [seq, why] = p.landings.declines_.front();
  engine().control_.send(p, wire::kDecline, std::as_bytes(std::span(why)), seq);
  if (p.ctrl.busy(wire::kDecline)) p.landings.declines_.pop_front();
}

void Landings::on_decline(PeerData& p, const wire::Header& h, std::span<const std::byte> body) {
  if (body.empty()) {  // the sender's answer to ours: its send knows, the payload can go
    discard_payload(p, h.aux);
    return;
  }
  std::string why(reinterpret_cast<const char*>(body.data()), body.size());
  bool found = false;
  for (auto& op : engine().ops_) {
    if (op.in_use && op.kind == OpKind::kSendPayload && op.peer == p.id() && op.epoch == p.epoch() &&
        wire::tag_class(op.send.tag) == wire::kRndv && wire::tag_id(op.send.tag) == (h.aux & wire::kIdMask)) {
      op.send.declined = why;  // its completion reports it
      found = true;
      break;
    }
  }
  if (!found)
    SLUICE_LOG_RATE_LIMITED(kWarn, "am", "%s refused message %u, whose send is not in flight: %s", p.name(), h.aux,
                            why);
  p.landings.declines_.push_back({h.aux, std::string()});
  send_declines(p);
}

void Landings::start_rndv(PeerData& p, Message&& m, const wire::Header& h, bool ordered) {
  std::size_t size = h.payload_len;
  if (size > engine().config_.max_message) {
    engine().fail_peer(p, absl::StatusCode::kInvalidArgument,
                       absl::StrFormat("announced a %u-byte payload, above SLUICE_MAX_MESSAGE=%s", size,
                                       format_size(engine().config_.max_message)));
    return;
  }
  std::span<std::byte> dest = landing_for(p, m, size, false);
  if (!dest.empty()) post_landing(p, std::move(m), dest, ordered);
  else if (p.state() != PeerState::kDead && m.valid()) park(p, std::move(m), h, ordered);
}

void Landings::post_landing(PeerData& p, Message&& m, std::span<std::byte> dest, bool ordered) {
  state(m).payload = dest;
  Op* op = engine().ops_.take(OpKind::kRndvRx, p.id());
  op->epoch = p.epoch();
  op->recv.ordered = ordered;
  std::uint64_t tag = wire::make_tag(wire::kRndv, p.id(), state(m).seq);
  void* memh = state(m).landing ? slot_memh(state(m).landing) : nullptr;
  op->pending = std::move(m);
  free_announcement(p, op->pending);
  if (ordered) p.landings.blocked_ = true;
  ++p.landings.landing_;
  ++engine().exact_posted_;
  PostResult r = engine().worker_->post_recv(p.ep(), op, dest.data(), dest.size(), tag, kFullMask, memh);
  if (r.kind != Post::kPending) engine().done_.push_back({op, r.code, r.length, r.sender_tag});
  engine().fault_.pass(FaultPoint::kRndvLand);
}

void Landings::free_announcement(PeerData& p, Message& m) {
  // The payload has memory to land in (the receive budget's or a sink's), so the announcement
  // needs no receive slot: its credit goes back now, and the sender's next message does not wait
  // for this payload, its handler and a reply. A parked announcement keeps its credit, which
  // bounds how many can wait.
  std::size_t hl = state(m).header.size();
  std::unique_ptr<std::byte[]> copy;
  if (hl != 0) {
    copy.reset(new std::byte[hl]);
    std::memcpy(copy.get(), state(m).header.data(), hl);
  }
  if (state(m).slot) engine().receives_.give_back(p, std::move(state(m).slot));
  state(m).heap = std::move(copy);
  state(m).header = std::span<const std::byte>(state(m).heap.get(), hl);
  if (state(m).credit) {
    state(m).credit = false;
    engine().delivery_.return_credit(p, state(m).epoch);
  }
}

void Landings::park(PeerData& p, Message&& m, const wire::Header& h, bool ordered) {
  engine().c_.landing_waits->add();
  const Budget& b = engine().recv_pool_->budget();
  SLUICE_LOG_RATE_LIMITED(kWarn, "am",
                          "%s: a %u-byte payload waits for receive memory: %s of SLUICE_RECV_POOL_MAX=%s "
                          "held by messages not yet released; it lands when some are (am.landing_waits)",
                          p.name(), h.payload_len, format_size(b.held_bytes), format_size(b.max));
  if (ordered) p.landings.blocked_ = true;
  ++p.landings.parked_;
  parked_.push_back({p.id(), std::move(m), h, ordered});
  parked_at_returns_ = engine().recv_pool_->returns();
}

void Landings::retry_waiting() {
  parked_at_returns_ = engine().recv_pool_->returns();
  while (!parked_.empty()) {
    Parked& w = parked_.front();
    PeerData& p = engine().peers_.at(w.peer);
    bool frag = (w.header.flags & wire::kFlagFrag) != 0;
    std::span<std::byte> dest = pool_landing(p, w.message, w.header.payload_len, frag);
    if (dest.empty() && w.message.valid() && p.state() != PeerState::kDead) return;  // oldest first: the rest wait
    Parked go = std::move(w);
    parked_.pop_front();
    if (dest.empty()) {  // refused (its peer goes on) or its peer failed (parked_ is cleared of it)
      if (p.state() == PeerState::kDead) continue;
      --p.landings.parked_;
      if (go.ordered) p.landings.blocked_ = false;
      engine().delivery_.deliver(p);
      continue;
    }
    --p.landings.parked_;
    if (go.header.flags & wire::kFlagFrag) {
      start_fragments(p, std::move(go.message), dest);
      p.landings.blocked_ = false;
      engine().delivery_.deliver(p);
    } else {
      post_landing(p, std::move(go.message), dest, go.ordered);
    }
  }
}

std::uint64_t Landings::pool_returns() const { return engine().recv_pool_->returns(); }

void Landings::hold(PeerData& p) { p.landings.blocked_ = true; }

void Landings::peer_restarted(PeerData& p) { p.landings.landing_ = 0; }

void Landings::close() {
  parked_.clear();  // none is left (each peer's went when it failed); Messages hold pool memory
  engine().peers_.for_each([](PeerData& p) { p.landings.frag_ = Message(); });
}

void Landings::peer_failed(PeerData& p) {
  std::erase_if(parked_, [&](const Parked& w) { return w.peer == p.id(); });
  LandingsFrom& mine = p.landings;
  mine.parked_ = 0;
  mine.frag_ = Message();
  mine.blocked_ = false;
  mine.declines_.clear();  // a revived peer's sequences are new: none of these is its
}

void Landings::on_rndv_done(Op* op, absl::StatusCode code, std::size_t length) {
  --engine().exact_posted_;
  if (op->recv.discard) {  // a refused payload, taken and dropped (decline_landing)
    engine().ops_.give(op);
    return;
  }
  PeerData& p = engine().peers_.at(op->peer);
  Message m = std::move(op->pending);
  bool stale = op->epoch != p.epoch();
  bool ordered = op->recv.ordered;
  engine().ops_.give(op);
  if (stale) return;  // a partial payload never reaches a handler
  if (ordered) p.landings.blocked_ = false;
  --p.landings.landing_;
  if (code != absl::StatusCode::kOk || length != state(m).payload.size()) {
    SLUICE_LOG_RATE_LIMITED(kWarn, "am", "%s: rendezvous payload of %u bytes failed: %s, %u bytes landed", p.name(),
                            state(m).payload.size(), absl::StatusCodeToString(code), length);
    if (state(m).credit) {  // returned already when the landing was posted (free_announcement)
      state(m).credit = false;
      Delivery::credit_gone(p);
    }
    if (p.state() != PeerState::kDead && code != absl::StatusCode::kCancelled)
      engine().connections_.transfer_failed(
          p, absl::StrFormat("rendezvous payload failed: %s", absl::StatusCodeToString(code)));
    return;
  }
  engine().c_.rndv_received->add();
  engine().c_.received(p.traffic, 0, length);  // the payload; its announcement was counted as a message
  engine().delivery_.finish_incoming(p, m);
  m = Message();
  engine().delivery_.deliver(p);
}

void Landings::assemble_fragment(PeerData& p, Message&& m, const wire::Header& h) {
  if (h.aux == 0) {
    if (p.landings.frag_.valid()) {
      engine().c_.parse_errors->add();
      p.landings.frag_ = Message();
    }
    std::span<std::byte> dest = landing_for(p, m, h.payload_len, true);
    if (!dest.empty()) start_fragments(p, std::move(m), dest);
    else if (p.state() != PeerState::kDead) park(p, std::move(m), h, /*ordered=*/true);
    return;
  }
  // A later piece is only bytes: the first piece stands for the message (its request, its
  // reply), and this one's slot and credit go back once it is copied.
  state(m).request = false;
  state(m).reply_flag = false;
  std::size_t piece = state(m).payload.size();
  if (!p.landings.frag_.valid() || h.aux != p.landings.frag_received_ ||
      h.payload_len != state(p.landings.frag_).payload.size()) {
    engine().c_.parse_errors->add();
    SLUICE_LOG_RATE_LIMITED(kWarn, "am", "%s: fragment at %u out of place", p.name(), h.aux);
    return;
  }
  copy_payload(state(p.landings.frag_).payload.data() + h.aux, state(m).payload.data(), piece);
  add_fragment(p, piece);
}

void Landings::start_fragments(PeerData& p, Message&& m, std::span<std::byte> dest) {
  std::size_t piece = state(m).payload.size();
  copy_payload(dest.data(), state(m).payload.data(), piece);
  state(m).payload = dest;
  p.landings.frag_ = std::move(m);
  p.landings.frag_received_ = 0;
  add_fragment(p, piece);
}

void Landings::add_fragment(PeerData& p, std::size_t piece) {
  engine().c_.bounce_bytes->add(piece);
  p.landings.frag_received_ += piece;
  if (p.landings.frag_received_ == state(p.landings.frag_).payload.size()) {
    Message done = std::move(p.landings.frag_);
    p.landings.frag_received_ = 0;
    engine().delivery_.finish_incoming(p, done);
  }
}

}  // namespace sluice::detail
