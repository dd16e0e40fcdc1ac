// The receive path: per-peer receives, first contact, parsing, in-order delivery, handler
// dispatch, message release and credit return.

#include <algorithm>
#include <cassert>
#include <cstring>
#include <exception>

#include <absl/strings/str_format.h>

#include "am/engine_core.h"
#include "am/invoke.h"
#include "core/copy.h"
#include "core/log.h"
#include "core/probe.h"

namespace sluice::detail {

void EngineCore::on_rx(Op* op, absl::StatusCode code, std::size_t length, std::uint64_t tag) {
  // The operation goes back for re-posting at once (a handler that progresses the engine
  // finds it there and re-posts it with a fresh slot). Its slot is held here while the
  // message is handled, and given back to it afterwards unless a Message kept it or the
  // operation was re-posted meanwhile: the usual re-post then needs no pool take, and the
  // usual release no pool return.
  probe::stamp(probe::kRxTaken);
  Slot slot = std::move(op->slot);
  receives_.requeue(op);
  if (code != absl::StatusCode::kOk) [[unlikely]] {
    if (code != absl::StatusCode::kCancelled) {
      c_.parse_errors->add();
      SLUICE_LOG_RATE_LIMITED(kWarn, "am", "receive failed: %s (a message larger than a slot?)",
                              absl::StatusCodeToString(code));
    }
    return;
  }
  parse_and_accept(std::span<std::byte>(slot_data(slot), length), &slot, tag);
  if (slot && !op->slot) op->slot = std::move(slot);
}

// Inlined into on_rx, its one caller: every received message passes here.
[[gnu::always_inline]] inline void EngineCore::parse_and_accept(std::span<std::byte> bytes, Slot* lender,
                                                                std::uint64_t tag, bool ctrl_only) {
  PeerData* p = peer_by_slot(wire::tag_slot(tag));
  if (!ctrl_only && p != nullptr && wire::tag_id(tag) != p->posted.key()) [[unlikely]] {
    // Taken by a receive posted under a retired key (the peer failed, and came back before
    // the receive's cancellation was handled): its previous incarnation's, not the new one's.
    count_drop("sent to a closed connection");
    return;
  }
  wire::Header h;
  wire::Parse pr = wire::decode(bytes, &h);
  if (p == nullptr || pr != wire::Parse::kOk) [[unlikely]] {
    c_.parse_errors->add();
    SLUICE_LOG_RATE_LIMITED(kWarn, "wire", "rejected a message from slot %u: %s", wire::tag_slot(tag),
                            p == nullptr ? "no such rank" : wire::to_string(pr));
    if (p != nullptr && (pr == wire::Parse::kBadVersion || pr == wire::Parse::kBadMagic) &&
        p->state != PeerState::kDead) {
      std::string why = absl::StrFormat("wire protocol mismatch (%s); this side speaks version %d", wire::to_string(pr),
                                        wire::kVersion);
      if (p->ep.valid() || ensure_endpoint(*p).ok())
        sender_.send_ctrl(*p, wire::kReject, std::span(reinterpret_cast<const std::byte*>(why.data()), why.size()));
      fail_peer(*p, absl::StatusCode::kUnavailable, why);
    }
    return;
  }
  if (ctrl_only && !(h.flags & wire::kFlagCtrl)) [[unlikely]] {
    c_.parse_errors->add();
    SLUICE_LOG_RATE_LIMITED(kWarn, "wire", "%s sent a data message with a control-class tag; dropped", p->name);
    return;
  }
  if (h.flags & wire::kFlagMore) [[unlikely]] {
    accept_coalesced(p, bytes);
    return;
  }
  accept(p, lender, bytes, h);
}

void EngineCore::accept_contact(std::span<std::byte> bytes, std::uint64_t tag) {
  parse_and_accept(bytes, nullptr, tag, /*ctrl_only=*/true);
}

void EngineCore::accept_coalesced(PeerData* p, std::span<const std::byte> batch) {
  // Several messages in one tagged message: each is checked against the bytes that remain and
  // taken like any other, its Message borrowing its bytes from the batch's slot, which on_rx
  // holds until the last has been handled. A Message kept beyond its handler (moved) copies
  // its bytes into a receive slot of its own then (own_bytes): the peer's credits bound
  // those, so they stay within the reservation.
  wire::Parse pr = wire::for_each_message(batch, [&](const wire::Header& h, std::span<const std::byte> msg) {
    // Only eager messages with the full header ride coalesced (wire-protocol.md): anything
    // else is refused.
    if (h.flags & (wire::kFlagCtrl | wire::kFlagRndv | wire::kFlagFrag | wire::kFlagCompact)) {
      c_.parse_errors->add();
      SLUICE_LOG_RATE_LIMITED(kWarn, "wire",
                              "%s coalesced a control, rendezvous, fragment or compact message; rest dropped", p->name);
      return false;
    }
    // A correct peer never has more messages unreleased or unreturned than it was
    // granted; one beyond that could make kept messages take more than the reservation.
    if (p->state == PeerState::kReady && p->rx.unreleased_ + p->rx.owed_.owed() >= p->rx.granted_) {
      c_.parse_errors->add();
      SLUICE_LOG_RATE_LIMITED(kWarn, "flow", "%s sent more coalesced messages than it had credits; rest dropped",
                              p->name);
      return false;
    }
    std::span<std::byte> bytes(const_cast<std::byte*>(msg.data()), msg.size());
    accept(p, nullptr, bytes, h);
    return true;
  });
  if (pr != wire::Parse::kOk) {
    c_.parse_errors->add();
    SLUICE_LOG_RATE_LIMITED(kWarn, "wire", "%s: a coalesced message was rejected: %s; the rest dropped", p->name,
                            wire::to_string(pr));
  }
}

// Inlined into on_rx (every tagged message holding one message passes here) and into
// accept_coalesced.
[[gnu::always_inline]] inline void EngineCore::accept(PeerData* p, Slot* lender, std::span<std::byte> bytes,
                                                      const wire::Header& h) {
  std::size_t length = bytes.size();
  LinkControl::heard(p->link, now_);
  if (h.flags & wire::kFlagCtrl) {
    link_.handle_ctrl(*p, h, std::span<const std::byte>(bytes.data() + wire::kHeaderSize, h.user_header_len));
    return;
  }
  bool early = false;  // before its sender's HELLO
  if (p->state != PeerState::kReady) [[unlikely]]
    if (!admit_unready(*p, &early)) return;
  count_received(*p, 1, length);
  std::uint64_t seq = h.seq;
  if (h.flags & wire::kFlagCompact) [[likely]]
    seq = wire::extend_seq(p->rx.window_.expected(), static_cast<std::uint32_t>(h.seq));
  bool returned = h.credits != 0;
  // A copy of a message already delivered (a transport that duplicates) is dropped below by
  // its sequence; the credits it carries were counted with the original.
  if (returned && static_cast<std::int64_t>(seq - p->rx.window_.expected()) < 0) [[unlikely]]
    returned = false;
  else if (returned && !Sender::credits_back(p->tx, h.credits)) {
    c_.parse_errors->add();
    SLUICE_LOG_RATE_LIMITED(kWarn, "flow", "%s returned %u credits, more than granted", p->name, h.credits);
  }
  // The fast path builds only the Message; the early-arrival path wraps it (with its header)
  // for the reorder window. Zeroing a whole Incoming per message was a measurable cost.
  Message m;
  attach(m);
  m.s_.peer = p->id;
  m.s_.source = static_cast<int>(p->id);
  m.s_.epoch = p->epoch;
  m.s_.handler = h.handler;
  if (h.flags & (wire::kFlagRequest | wire::kFlagReply)) {  // a plain message keeps the zeros
    m.s_.request = (h.flags & wire::kFlagRequest) != 0;
    m.s_.reply_flag = (h.flags & wire::kFlagReply) != 0;
    m.s_.reply_buf = (h.flags & wire::kFlagReplyBuf) != 0;
    m.s_.reply_capacity = h.aux;
    m.s_.rpc_id = h.rpc_id;
    m.s_.status = h.status;
  }
  m.s_.seq = seq;
  m.s_.announced = h.payload_len;
  m.s_.credit = true;
  ++p->rx.unreleased_;
  std::byte* d = bytes.data() + wire::header_size(h);
  m.s_.header = std::span<const std::byte>(d, h.user_header_len);
  std::size_t inl = (h.flags & wire::kFlagRndv) ? 0 : wire::inline_payload(h, length);
  m.s_.payload = std::span<std::byte>(d + h.user_header_len, inl);
  m.s_.borrowed = true;
  m.s_.lender = lender;
  if (!p->landings.blocked() && !early && p->rx.window_.take_in_order(seq)) [[likely]] {
    // A plain message in order (the common case) goes straight to its handler.
    constexpr std::uint8_t kNotPlain = wire::kFlagFrag | wire::kFlagRndv | wire::kFlagRequest | wire::kFlagReply;
    if ((h.flags & kNotPlain) == 0 && !shutting_down_) [[likely]] {
      dispatch(m);
    } else {
      process(*p, m, h);
    }
    // Still here (not kept, moved or released), and not a request waiting for its answer: its
    // credit goes back now, without the general release's checks (engine thread, nothing
    // owned but the borrow).
    if (m.s_.anchor != nullptr && (!m.s_.request || m.s_.replied)) [[likely]]
      release_handled(*p, m);
    if (!p->landings.blocked() && p->rx.window_.held() != 0) deliver(*p);
    if (p->link.bye_received()) [[unlikely]]
      link_.close_after_bye(*p);
    if (returned && p->has_waiting()) sender_.flush(*p);
    return;
  }
  hold_or_drop(*p, std::move(m), h, seq);
  if (returned && p->has_waiting()) sender_.flush(*p);
}

bool EngineCore::admit_unready(PeerData& p, bool* early) {
  // Its HELLO may have gone first yet still wait in UCX: a CTRL-class message is taken only
  // by probing, on timer ticks; a message on our EAGER tag is taken at once. Take it now.
  if (p.state != PeerState::kDead && !p.link.hello_received()) receives_.take_first_contacts();
  if (p.state == PeerState::kReady) return true;
  // Or it is still on its way (a transport that reorders between tags): the peer has our
  // HELLO, since it used our key, so the message waits in the window for the peer's, within
  // the grant, for at most a heartbeat interval (timers()).
  *early = p.state == PeerState::kConnecting && p.link.hello_sent() && !p.link.hello_received();
  if (!*early) {
    count_drop(p.state == PeerState::kDead ? "from a dead peer" : "before the handshake");
    return false;
  }
  LinkControl::early(p.link, now_);
  return true;
}

void EngineCore::hold_or_drop(PeerData& p, Message&& m, const wire::Header& h, std::uint64_t seq) {
  Incoming in;
  in.message = std::move(m);
  in.header = h;
  in.header.seq = seq;
  switch (p.rx.window_.offer(seq, std::move(in), p.rx.granted_ + 64)) {
    case Arrival::kDeliver:
    case Arrival::kEarly: break;
    case Arrival::kDuplicate:
      c_.duplicates->add();
      // offer() moves only what it keeps (kEarly, kDeliver): a duplicate is still here.
      in.message.s_.credit = false;  // NOLINT(bugprone-use-after-move)
      --p.rx.unreleased_;
      SLUICE_LOG_RATE_LIMITED(kInfo, "am", "%s: dropped duplicate or stale sequence %u (expected %u)", p.name, seq,
                              p.rx.window_.expected());
      break;
  }
  deliver(p);
}

void EngineCore::deliver(PeerData& p) {
  while (!p.landings.blocked() && p.state == PeerState::kReady) {
    Incoming in;
    if (!p.rx.window_.next(&in)) break;
    process(p, in.message, in.header);
  }
  if (p.link.bye_received()) [[unlikely]]
    link_.close_after_bye(p);
}

void EngineCore::process(PeerData& p, Message& m, const wire::Header& h) {
  if (h.flags & wire::kFlagFrag) {
    landings_.assemble_fragment(p, std::move(m), h);
    return;
  }
  bool reply_into_buffer = (h.flags & wire::kFlagReply) && (h.flags & wire::kFlagReplyBuf);
  if ((h.flags & wire::kFlagRndv) && !reply_into_buffer) {
    bool ordered = true;
    if (m.s_.handler < kMaxHandlers && !m.s_.reply_flag) ordered = !handlers_[m.s_.handler].options.unordered;
    landings_.start_rndv(p, std::move(m), h, ordered);
    return;
  }
  finish_incoming(p, m);
}

void EngineCore::finish_incoming(PeerData& p, Message& m) {
  if (m.s_.reply_flag) rpc_client_.on_reply(p, m);  // completes a call of ours, like a send completion
  else if (shutting_down_) [[unlikely]] {
    if (m.s_.request) rpc_server_.answer_error(m, absl::StatusCode::kUnavailable, {});
    count_drop("the engine is closing; handlers no longer run");
  } else if (m.s_.request) rpc_server_.on_request(p, m);
  else dispatch(m);
}

void EngineCore::handler_threw(const Message& m, const char* what) {
  handler_error_ = what;
  c_.handler_errors->add();
  SLUICE_LOG_RATE_LIMITED(kError, "am", "handler %d threw: %s", m.s_.handler, handler_error_);
}

void EngineCore::own_bytes(Message& m) {
  Slot* lender = m.s_.lender;
  m.s_.lender = nullptr;
  m.s_.borrowed = false;
  if (lender != nullptr && *lender) {
    m.s_.slot = std::move(*lender);  // the bytes stay where they are
    return;
  }
  std::size_t hl = m.s_.header.size(), pl = m.s_.payload.size();
  std::byte* d;
  Slot own;
  if (recv_pool_->eager().try_take(&own) == Result::kOk && slot_size(own) >= hl + pl) {
    d = slot_data(own);
    m.s_.slot = std::move(own);
  } else {
    own.release();
    m.s_.heap.reset(new std::byte[hl + pl]);
    d = m.s_.heap.get();
  }
  if (hl != 0) std::memcpy(d, m.s_.header.data(), hl);
  if (pl != 0) copy_payload(d + hl, m.s_.payload.data(), pl);
  m.s_.header = std::span<const std::byte>(d, hl);
  m.s_.payload = std::span<std::byte>(d + hl, pl);
}

void EngineCore::release_handled(PeerData& p, Message& m) {
  detach(m);  // the caller destroys it next: nothing else of it needs resetting
  return_credit(p, m.s_.epoch);
}

void EngineCore::return_credit(PeerData& p, std::uint64_t epoch) {
  // A handler may have progressed the engine, and the peer failed or restarted meanwhile. A
  // dead peer's messages are still counted down: its slot is reused only when none is left.
  if (p.epoch != epoch) [[unlikely]]
    return;
  --p.rx.unreleased_;
  if (p.state != PeerState::kReady) [[unlikely]]
    return;
  p.rx.owed_.released();
  sender_.maybe_return_credits(p);
}

void EngineCore::give_back_sink(Message& m) {
  m.s_.sink_landing = false;
  SinkRelease* give = m.s_.handler < kMaxHandlers ? &handlers_[m.s_.handler].options.sink_release : nullptr;
  if (give == nullptr || !*give) {
    SLUICE_LOG_RATE_LIMITED(kWarn, "am",
                            "handler %d's sink buffer of %u bytes was not delivered and there is no "
                            "sink_release to give it back to",
                            m.s_.handler, m.s_.payload.size());
    return;
  }
  c_.sink_returned->add();
  try {
    (*give)(m, m.s_.payload);
  } catch (const std::exception& e) {
    handler_threw(m, e.what());
  } catch (...) {
    handler_threw(m, "a non-standard exception");
  }
}

void EngineCore::release(Message& m) {
  // Bound to this thread, not merely unbound: a Message may be dropped on any thread, also
  // while the engine is between drivers (after release_thread()).
  if (driver_tp_.load(std::memory_order_acquire) != thread_pointer()) [[unlikely]] {
    // Released on another thread (message.h asks for the engine's): its credit, slot and
    // unanswered request belong to the engine thread's state, so the release is handed there.
    auto* held = new Message(std::move(m));
    post([held] { delete held; });
    return;
  }
  if (m.s_.sink_landing) [[unlikely]]
    give_back_sink(m);
  if (m.s_.request && !m.s_.replied)
    rpc_server_.answer_error(m, absl::StatusCode::kInternal,
                             "the server's handler released the request without a reply");
  if (m.s_.credit) return_credit(*peers_[m.s_.peer], m.s_.epoch);
  detach(m);
  m.s_ = {};
}

}  // namespace sluice::detail
