// Delivery: parsing, in-order delivery, handler dispatch, message release and credit return.

#include <algorithm>
#include <cassert>
#include <cstring>
#include <exception>

#include <absl/strings/str_format.h>

#include "am/delivery.h"

#include "am/engine_core.h"
#include "am/invoke.h"
#include "core/copy.h"
#include "core/log.h"
#include "core/probe.h"

namespace sluice::detail {

void Delivery::on_rx(Op* op, absl::StatusCode code, std::size_t length, std::uint64_t tag) {
  // The operation goes back for re-posting at once (a handler that progresses the engine
  // finds it there and re-posts it with a fresh slot). Its slot is held here while the
  // message is handled, and given back to it afterwards unless a Message kept it or the
  // operation was re-posted meanwhile: the usual re-post then needs no pool take, and the
  // usual release no pool return.
  probe::stamp(probe::kRxTaken);
  Slot slot = std::move(op->slot);
  engine().receives_.requeue(op);
  if (code != absl::StatusCode::kOk) [[unlikely]] {
    if (code != absl::StatusCode::kCancelled) {
      engine().c_.parse_errors->add();
      SLUICE_LOG_RATE_LIMITED(kWarn, "am", "receive failed: %s (a message larger than a slot?)",
                              absl::StatusCodeToString(code));
    }
  } else {
    parse_and_accept(std::span<std::byte>(slot_data(slot), length), &slot, tag);
  }
  // Back to its operation, unless a kept message took it (it holds it now) or the operation
  // was re-posted with another meanwhile (this one goes back to the pool).
  if (slot) [[likely]] {
    if (!op->slot) [[likely]]
      op->slot = std::move(slot);
    else engine().receives_.give_back(engine().peers_.at(op->peer), std::move(slot));
  }
}

// Inlined into on_rx, its one caller: every received message passes here.
[[gnu::always_inline]] inline void Delivery::parse_and_accept(std::span<std::byte> bytes, Slot* lender,
                                                              std::uint64_t tag, bool ctrl_only) {
  PeerData* p = engine().peers_.by_index(wire::tag_index(tag));
  if (!ctrl_only && p != nullptr && wire::tag_id(tag) != p->posted.key()) [[unlikely]] {
    // Taken by a receive posted under a retired key (the peer failed, and came back before
    // the receive's cancellation was handled): its previous incarnation's, not the new one's.
    engine().c_.dropped("sent to a closed connection");
    return;
  }
  wire::Header h;
  wire::Parse pr = wire::decode(bytes, &h);
  if (p == nullptr || pr != wire::Parse::kOk) [[unlikely]] {
    engine().c_.parse_errors->add();
    SLUICE_LOG_RATE_LIMITED(kWarn, "wire", "rejected a message from index %u: %s", wire::tag_index(tag),
                            p == nullptr ? "no such rank" : wire::to_string(pr));
    if (p != nullptr && (pr == wire::Parse::kBadVersion || pr == wire::Parse::kBadMagic) &&
        p->state() != PeerState::kDead) {
      std::string why = absl::StrFormat("wire protocol mismatch (%s); this side speaks version %d", wire::to_string(pr),
                                        wire::kVersion);
      if (p->ep().valid() || engine().peers_.ensure_endpoint(*p).ok())
        engine().control_.send(*p, wire::kReject,
                               std::span(reinterpret_cast<const std::byte*>(why.data()), why.size()));
      engine().fail_peer(*p, absl::StatusCode::kUnavailable, why);
    }
    return;
  }
  if (ctrl_only && !(h.flags & wire::kFlagCtrl)) [[unlikely]] {
    engine().c_.parse_errors->add();
    SLUICE_LOG_RATE_LIMITED(kWarn, "wire", "%s sent a data message with a control-class tag; dropped", p->name());
    return;
  }
  if (h.flags & wire::kFlagMore) [[unlikely]] {
    accept_coalesced(p, bytes);
    return;
  }
  accept(p, lender, bytes, h);
}

void Delivery::accept_contact(std::span<std::byte> bytes, std::uint64_t tag) {
  parse_and_accept(bytes, nullptr, tag, /*ctrl_only=*/true);
}

void Delivery::accept_coalesced(PeerData* p, std::span<const std::byte> batch) {
  // Several messages in one tagged message: each is checked against the bytes that remain and
  // taken like any other, its Message borrowing its bytes from the batch's slot, which on_rx
  // holds until the last has been handled. A Message kept beyond its handler (moved) copies
  // its bytes into a receive slot of its own then (own_bytes): the peer's credits bound
  // those, so they stay within the reservation.
  wire::Parse pr = wire::for_each_message(batch, [&](const wire::Header& h, std::span<const std::byte> msg) {
    // Only eager messages with the full header ride coalesced (wire-protocol.md): anything
    // else is refused.
    if (h.flags & (wire::kFlagCtrl | wire::kFlagRndv | wire::kFlagFrag | wire::kFlagCompact)) {
      engine().c_.parse_errors->add();
      SLUICE_LOG_RATE_LIMITED(
          kWarn, "wire", "%s coalesced a control, rendezvous, fragment or compact message; rest dropped", p->name());
      return false;
    }
    // A correct peer never has more messages unreleased or unreturned than it was
    // granted; one beyond that could make kept messages take more than the reservation.
    if (p->state() == PeerState::kReady && p->rx.unreleased_ + p->rx.owed_.owed() >= p->rx.granted_) {
      engine().c_.parse_errors->add();
      SLUICE_LOG_RATE_LIMITED(kWarn, "flow", "%s sent more coalesced messages than it had credits; rest dropped",
                              p->name());
      return false;
    }
    std::span<std::byte> bytes(const_cast<std::byte*>(msg.data()), msg.size());
    accept(p, nullptr, bytes, h);
    return true;
  });
  if (pr != wire::Parse::kOk) {
    engine().c_.parse_errors->add();
    SLUICE_LOG_RATE_LIMITED(kWarn, "wire", "%s: a coalesced message was rejected: %s; the rest dropped", p->name(),
                            wire::to_string(pr));
  }
}

// Inlined into on_rx (every tagged message holding one message passes here) and into
// accept_coalesced.
[[gnu::always_inline]] inline void Delivery::accept(PeerData* p, Slot* lender, std::span<std::byte> bytes,
                                                    const wire::Header& h) {
  std::size_t length = bytes.size();
  if (h.flags & wire::kFlagCtrl) {
    engine().link_.heard_ctrl(p->link, p->id(), h.handler, engine().now_);
    engine().link_.handle_ctrl(*p, h, std::span<const std::byte>(bytes.data() + wire::kHeaderSize, h.user_header_len));
    return;
  }
  engine().link_.heard(p->link, p->id(), engine().now_);
  bool early = false;  // before its sender's HELLO
  if (p->state() != PeerState::kReady) [[unlikely]]
    if (!admit_unready(*p, &early)) return;
  engine().c_.received(p->traffic, 1, length);
  std::uint64_t seq = h.seq;
  if (h.flags & wire::kFlagCompact) [[likely]]
    seq = wire::extend_seq(p->rx.window_.expected(), static_cast<std::uint32_t>(h.seq));
  bool returned = h.credits != 0;
  // A copy of a message already delivered (a transport that duplicates) is dropped below by
  // its sequence; the credits it carries were counted with the original.
  if (returned && static_cast<std::int64_t>(seq - p->rx.window_.expected()) < 0) [[unlikely]]
    returned = false;
  else if (returned && !Sender::credits_back(p->tx, h.credits)) {
    engine().c_.parse_errors->add();
    SLUICE_LOG_RATE_LIMITED(kWarn, "flow", "%s returned %u credits, more than granted", p->name(), h.credits);
  }
  // The fast path builds only the Message; the early-arrival path wraps it (with its header)
  // for the reorder window. Zeroing a whole Incoming per message was a measurable cost.
  Message m;
  attach(m);
  state(m).peer = p->id();
  state(m).source = static_cast<int>(p->id());
  state(m).epoch = p->epoch();
  state(m).handler = h.handler;
  if (h.flags & (wire::kFlagRequest | wire::kFlagReply)) {  // a plain message keeps the zeros
    state(m).request = (h.flags & wire::kFlagRequest) != 0;
    state(m).reply_flag = (h.flags & wire::kFlagReply) != 0;
    state(m).reply_buf = (h.flags & wire::kFlagReplyBuf) != 0;
    state(m).reply_capacity = h.aux;
    state(m).rpc_id = h.rpc_id;
    state(m).status = h.status;
  }
  state(m).seq = seq;
  state(m).announced = h.payload_len;
  state(m).credit = true;
  ++p->rx.unreleased_;
  std::byte* d = bytes.data() + wire::header_size(h);
  state(m).header = std::span<const std::byte>(d, h.user_header_len);
  std::size_t inl = (h.flags & wire::kFlagRndv) ? 0 : wire::inline_payload(h, length);
  state(m).payload = std::span<std::byte>(d + h.user_header_len, inl);
  state(m).borrowed = true;
  state(m).lender = lender;
  if (!p->landings.blocked() && !early && p->rx.window_.take_in_order(seq)) [[likely]] {
    hand_over(*p, m, h);
    // Still here (not kept, moved or released), and not a request waiting for its answer: its
    // credit goes back now, without the general release's checks (engine thread, nothing
    // owned but the borrow).
    if (state(m).anchor != nullptr && (!state(m).request || state(m).replied)) [[likely]]
      release_handled(*p, m);
    if (!p->landings.blocked() && p->rx.window_.held() != 0) deliver(*p);
    if (p->link.bye_received()) [[unlikely]]
      engine().link_.close_after_bye(*p);
    if (returned && p->has_waiting()) engine().sender_.flush(*p);
    return;
  }
  hold_or_drop(*p, std::move(m), h, seq);
  if (returned && p->has_waiting()) engine().sender_.flush(*p);
}

// Inlined into accept: a message in order goes to whoever takes it. A plain one (the common
// case) straight to its handler, an eager request to the RPC server, an eager reply to the RPC
// client (what process() and finish_incoming() would decide for them); the rest to process().
[[gnu::always_inline]] inline void Delivery::hand_over(PeerData& p, Message& m, const wire::Header& h) {
  constexpr std::uint8_t kNotPlain = wire::kFlagFrag | wire::kFlagRndv | wire::kFlagRequest | wire::kFlagReply;
  constexpr std::uint8_t kNotEager = wire::kFlagFrag | wire::kFlagRndv | wire::kFlagReply;
  bool closing = engine().shutting_down_;
  if ((h.flags & kNotPlain) == 0 && !closing) [[likely]] {
    engine().handlers_.dispatch(m);
  } else if ((h.flags & kNotEager) == 0 && !closing) {
    engine().rpc_server_.on_request(p, m);
  } else if ((h.flags & kNotPlain) == wire::kFlagReply) {  // an eager reply: a call of ours completes
    engine().rpc_client_.on_reply(p, m);
  } else {
    process(p, m, h);
  }
}

bool Delivery::admit_unready(PeerData& p, bool* early) {
  // Its HELLO may have gone first yet still wait in UCX: a CTRL-class message is taken only
  // by probing, on timer ticks; a message on our EAGER tag is taken at once. Take it now.
  if (p.state() != PeerState::kDead && !p.link.hello_received()) engine().receives_.take_first_contacts();
  if (p.state() == PeerState::kReady) return true;
  // Or it is still on its way (a transport that reorders between tags): the peer has our
  // HELLO, since it used our key, so the message waits in the window for the peer's, within
  // the grant, for at most a heartbeat interval (timers()).
  *early = p.state() == PeerState::kConnecting && p.link.hello_sent() && !p.link.hello_received();
  if (!*early) {
    engine().c_.dropped(p.state() == PeerState::kDead ? "from a dead peer" : "before the handshake");
    return false;
  }
  LinkControl::early(p.link, engine().now_);
  return true;
}

void Delivery::hold_or_drop(PeerData& p, Message&& m, const wire::Header& h, std::uint64_t seq) {
  Incoming in;
  in.message = std::move(m);
  in.header = h;
  in.header.seq = seq;
  switch (p.rx.window_.offer(seq, std::move(in), p.rx.granted_ + 64)) {
    case Arrival::kDeliver:
    case Arrival::kEarly: break;
    case Arrival::kDuplicate:
      engine().c_.duplicates->add();
      // offer() moves only what it keeps (kEarly, kDeliver): a duplicate is still here.
      state(in.message).credit = false;  // NOLINT(bugprone-use-after-move)
      --p.rx.unreleased_;
      SLUICE_LOG_RATE_LIMITED(kInfo, "am", "%s: dropped duplicate or stale sequence %u (expected %u)", p.name(), seq,
                              p.rx.window_.expected());
      break;
  }
  deliver(p);
}

void Delivery::deliver(PeerData& p) {
  while (!p.landings.blocked() && p.state() == PeerState::kReady) {
    Incoming in;
    if (!p.rx.window_.next(&in)) break;
    process(p, in.message, in.header);
  }
  if (p.link.bye_received()) [[unlikely]]
    engine().link_.close_after_bye(p);
}

void Delivery::process(PeerData& p, Message& m, const wire::Header& h) {
  if (h.flags & wire::kFlagFrag) {
    engine().landings_.assemble_fragment(p, std::move(m), h);
    return;
  }
  bool reply_into_buffer = (h.flags & wire::kFlagReply) && (h.flags & wire::kFlagReplyBuf);
  if ((h.flags & wire::kFlagRndv) && !reply_into_buffer) {
    const HandlerOptions* options = engine().handlers_.options(state(m).handler);
    bool ordered = state(m).reply_flag || options == nullptr || !options->unordered;
    engine().landings_.start_rndv(p, std::move(m), h, ordered);
    return;
  }
  finish_incoming(p, m);
}

void Delivery::finish_incoming(PeerData& p, Message& m) {
  if (state(m).reply_flag) engine().rpc_client_.on_reply(p, m);  // completes a call of ours, like a send completion
  else if (engine().shutting_down_) [[unlikely]] {
    if (state(m).request) engine().rpc_server_.answer_error(m, absl::StatusCode::kUnavailable, {});
    engine().c_.dropped("the engine is closing; handlers no longer run");
  } else if (state(m).request) engine().rpc_server_.on_request(p, m);
  else engine().handlers_.dispatch(m);
}

void Delivery::own_bytes(Message& m) {
  Slot* lender = state(m).lender;
  state(m).lender = nullptr;
  state(m).borrowed = false;
  if (lender != nullptr && *lender) {
    state(m).slot = std::move(*lender);  // the bytes stay where they are, counted as its peer's
    return;
  }
  // One of a coalesced tagged message's: a slot of its own while its peer may hold one more.
  std::size_t hl = state(m).header.size(), pl = state(m).payload.size();
  std::byte* d;
  Slot own;
  PeerData& p = engine().peers_.at(state(m).peer);
  if (hl + pl <= engine().recv_pool_->eager().slot_size() && !Receives::full(p) &&
      engine().receives_.take_slot(p, &own) == Result::kOk) {
    d = slot_data(own);
    state(m).slot = std::move(own);
  } else {
    state(m).heap.reset(new std::byte[hl + pl]);
    d = state(m).heap.get();
  }
  if (hl != 0) std::memcpy(d, state(m).header.data(), hl);
  if (pl != 0) copy_payload(d + hl, state(m).payload.data(), pl);
  state(m).header = std::span<const std::byte>(d, hl);
  state(m).payload = std::span<std::byte>(d + hl, pl);
}

// Inlined into on_rx: every plain message its handler let go of passes here.
[[gnu::always_inline]] inline void Delivery::release_handled(PeerData& p, Message& m) {
  detach(m);  // the caller destroys it next: nothing else of it needs resetting
  return_credit(p, state(m).epoch);
}

void Delivery::release(Message& m) {
  // Bound to this thread, not merely unbound: a Message may be dropped on any thread, also
  // while the engine is between drivers (after release_thread()).
  if (!engine().guard_.bound_here(std::memory_order_acquire)) [[unlikely]] {
    // Released on another thread (message.h asks for the engine's): its credit, slot and
    // unanswered request belong to the engine thread's state, so the release is handed there.
    auto* held = new Message(std::move(m));
    engine().post([held] { delete held; });
    return;
  }
  if (state(m).sink_landing) [[unlikely]]
    engine().handlers_.give_back_sink(m);
  if (state(m).request && !state(m).replied)
    engine().rpc_server_.answer_error(m, absl::StatusCode::kInternal,
                                      "the server's handler released the request without a reply");
  if (state(m).credit) return_credit(engine().peers_.at(state(m).peer), state(m).epoch);
  if (state(m).slot) engine().receives_.give_back(engine().peers_.at(state(m).peer), std::move(state(m).slot));
  detach(m);
  clear(state(m));
}

void Delivery::watch_held(PeerData& p, Clock::time_point now) {
  if (p.rx.granted_ == 0 || p.rx.unreleased_ < p.rx.granted_) [[likely]] {
    p.rx.held_since_ = {};
    p.rx.held_logged_ = false;
    return;
  }
  if (p.rx.held_since_ == Clock::time_point{}) p.rx.held_since_ = now;
  if (p.rx.held_logged_ || now - p.rx.held_since_ < engine().config_.heartbeat) return;
  p.rx.held_logged_ = true;
  if (std::size_t waiting = engine().handlers_.kept_from(p.id()); waiting != 0) {
    SLUICE_LOG(kWarn, "flow",
               "%s cannot send: %u of its %u credits are held by messages for handlers not registered here "
               "(am.unclaimed); register them (Engine::register_handler) to let it go on",
               p.name(), waiting, p.rx.granted_);
    return;
  }
  SLUICE_LOG(kWarn, "flow",
             "%s cannot send: all %u of its credits are held by %u of its messages this application has not "
             "released (for %s). A Message returns its credit when it is destroyed or release()d; raise "
             "SLUICE_CREDITS if the application must keep more (flow.peers_held)",
             p.name(), p.rx.granted_, p.rx.unreleased_,
             format_duration(std::chrono::duration_cast<std::chrono::milliseconds>(now - p.rx.held_since_)));
}

}  // namespace sluice::detail
