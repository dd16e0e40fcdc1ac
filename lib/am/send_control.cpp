// The sender's control side: CREDIT, PING/PONG, BYE, REJECT, DECLINE and HELLO leave through
// here (link control decides when); credits granted and returned; a failed peer's sends end.
#include <absl/strings/str_format.h>

#include "am/engine_core.h"
#include "core/log.h"

namespace sluice::detail {

void Sender::send_ctrl(PeerData& p, std::uint16_t kind, std::span<const std::byte> body, std::uint64_t aux) {
  if (!p.ep().valid()) return;
  if (p.tx.ctrl_busy_[kind]) {
    if (kind == wire::kCredit) p.tx.credit_again_ = true;  // resend when the previous completes
    return;
  }
  std::byte* buf = p.tx.ctrl_buf_[kind].data();
  wire::Header h;
  h.flags = wire::kFlagCtrl;
  h.handler = kind;
  h.user_header_len = static_cast<std::uint16_t>(body.size());
  h.credits = p.state() == PeerState::kReady || kind == wire::kCredit ? Delivery::take_owed(p.rx) : 0;
  h.ack = p.rx.window().delivered();
  // Heartbeats carry the credits returned in all, this one's included: the peer recovers
  // returns that were lost (SendCredits::reconcile).
  h.aux = kind == wire::kPing || kind == wire::kPong ? p.rx.owed().returned() : aux;
  wire::encode(h, buf);
  if (!body.empty()) std::memcpy(buf + wire::kHeaderSize, body.data(), body.size());
  Op* op = engine().ops_.take(OpKind::kCtrl, p.id());
  op->send.ctrl_kind = kind;
  op->epoch = p.epoch();
  p.tx.ctrl_busy_[kind] = true;
  engine().c_.ctrl_sent->add();
  ++inflight_;
  // On the peer's EAGER tag (in order with data, taken by a posted receive) once its HELLO
  // is here; before that it has no receive for us, and a CTRL-class message is found by probing.
  std::uint64_t tag = p.link.hello_received() ? p.tx.tag_ : wire::make_tag(wire::kCtrl, p.remote_index(), 0);
  PostResult r = p.ep().post_send(op, buf, wire::kHeaderSize + body.size(), tag, nullptr);
  if (r.kind == Post::kDone) engine().done_.push_back({op, absl::StatusCode::kOk, 0, 0});
  else if (r.kind == Post::kError) engine().done_.push_back({op, r.code, 0, 0});
}

void Sender::on_ctrl_done(Op* op, absl::StatusCode code) {
  --inflight_;
  PeerData& p = engine().peers_.at(op->peer);
  p.tx.ctrl_busy_[op->send.ctrl_kind] = false;
  std::uint16_t kind = op->send.ctrl_kind;
  bool stale = op->epoch != p.epoch();
  engine().ops_.give(op);
  if (stale) return;
  if (code != absl::StatusCode::kOk) {
    if (p.state() != PeerState::kDead)
      engine().connections_.transfer_failed(
          p, absl::StrFormat("control message failed: %s", absl::StatusCodeToString(code)));
    return;
  }
  if (kind == wire::kDecline) engine().landings_.send_declines(p);
  if (kind == wire::kCredit && p.tx.credit_again_ && p.state() == PeerState::kReady) {
    p.tx.credit_again_ = false;
    if (p.rx.owed().owed() != 0) {
      engine().c_.credit_msgs->add();
      send_ctrl(p, wire::kCredit, {});
    }
  }
}

void Sender::return_credits(PeerData& p) {
  engine().fault_.pass(FaultPoint::kCreditReturn);
  engine().c_.credit_msgs->add();
  send_ctrl(p, wire::kCredit, {});
}

void Sender::reconcile_credits(PeerData& p, std::uint64_t peer_returned) {
  std::int64_t d = p.tx.credits_.reconcile(peer_returned);
  if (d == 0) [[likely]]
    return;
  if (d > 0) {
    engine().c_.credits_recovered->add(static_cast<std::uint64_t>(d));
    SLUICE_LOG_RATE_LIMITED(kWarn, "flow", "%s: %d returned credits were lost in transit; recovered from its heartbeat",
                            p.name(), d);
  } else {
    SLUICE_LOG_RATE_LIMITED(kWarn, "flow", "%s: %d returned credits arrived twice; taken back at its heartbeat",
                            p.name(), -d);
  }
}

void Sender::watch_starved(PeerData& p, Clock::time_point now) {
  if (p.tx.queue_.empty()) [[likely]] {
    p.tx.starved_since_ = {};
    p.tx.starved_logged_ = false;
    return;
  }
  if (p.tx.starved_since_ == Clock::time_point{}) {
    p.tx.starved_since_ = now;
    p.tx.starved_stalls_ = p.traffic.credit_stalls();
  }
  if (p.tx.starved_logged_ || now - p.tx.starved_since_ < engine().config_.heartbeat) return;
  p.tx.starved_logged_ = true;
  SLUICE_LOG_RATE_LIMITED(
      kWarn, "flow",
      "%s holds the credits it granted us (%u of %u spent, for %s): %u of our messages wait in its send queue "
      "(SLUICE_SEND_QUEUE_MAX=%u; sends beyond it return kWouldBlock), %u credit stalls meanwhile "
      "(flow.credit_stalls). Its application keeps the Messages it received, or it does not progress",
      p.name(), p.tx.credits_.granted() - p.tx.credits_.available(), p.tx.credits_.granted(),
      format_duration(std::chrono::duration_cast<std::chrono::milliseconds>(now - p.tx.starved_since_)), p.tx.queued_,
      engine().config_.send_queue_max, p.traffic.credit_stalls() - p.tx.starved_stalls_);
}

void Sender::drop_queue(PeerData& p, std::deque<Pending>& q, const absl::Status& status) {
  while (!q.empty()) {
    Pending m = q.front();
    q.pop_front();
    Op* last = m.payload ? m.payload : m.header;
    if (last->send.on_done) last->send.on_done(status);
    if (last->send.ends_reply) engine().rpc_server_.reply_sent(p);  // a reply that never left
    complete_coalesced(m.header, status, false);                    // sends that joined it in the queue
    engine().ops_.give(m.header);
    if (m.payload) engine().ops_.give(m.payload);
  }
}

void Sender::complete_stuck(PeerData& p, const absl::Status& status) {
  auto stuck = [&](const Op& op) {
    return (op.kind == OpKind::kSend || op.kind == OpKind::kSendPayload) && op.peer == p.id() &&
           op.request != nullptr && !op.orphaned;
  };
  bool any = false;
  for (auto& op : engine().ops_) {
    if (stuck(op)) {
      engine().worker_->cancel(&op);
      any = true;
    }
  }
  if (!any) return;
  for (int i = 0; i < 100; ++i) engine().worker_->progress();
  for (auto& op : engine().ops_) {
    if (!stuck(op)) continue;
    op.orphaned = true;
    --inflight_;
    engine().c_.orphaned_sends->add();
    SLUICE_LOG_RATE_LIMITED(
        kWarn, "am", "peer %s: the transport did not complete a send to the dead peer; completed by sluice", p.name());
    if (op.send.on_done) {
      SendCallback cb = std::move(op.send.on_done);
      op.send.on_done = nullptr;
      cb(status);
    }
    if (op.send.ends_reply) op.send.ends_reply = false;
    complete_coalesced(&op, status, false);
    // Its pool slot goes back now ("pools full again" must not wait for a callback that may
    // never come). The endpoint is closed, so the transport sends nothing more from it, and
    // pool memory stays mapped while the engine lives, so even a late read would be harmless.
    // (A heap copy is kept until the callback: that memory could be unmapped; so is a request's
    // landing, which the receive pool unmaps when another class needs the room.)
    op.slot.release();
    if (op.pending.valid() && !state(op.pending).heap && !state(op.pending).landing)
      op.pending = Message();  // its eager slot
  }
}

void Sender::connect(PeerData& p, std::uint64_t tag, std::uint32_t credits) {
  p.tx.tag_ = tag;
  p.tx.credits_.grant(credits);
}

void Sender::hold_replies(PeerData& p, std::uint32_t n) { p.tx.reply_reserved_ = n; }

void Sender::restart(PeerData& p) {
  p.tx.credits_ = SendCredits();
  p.tx.next_seq_ = 1;
  p.tx.sent_seq_ = 0;
}

void Sender::drop_queued(PeerData& p, const absl::Status& status) {
  p.tx.queued_ = 0;
  drop_queue(p, p.tx.queue_, status);
}

void Sender::release_held(PeerData& p) {
  if (p.tx.reply_reserved_ != 0) {
    engine().send_pool_->eager().unreserve(p.tx.reply_reserved_);
    p.tx.reply_reserved_ = 0;
  }
}

}  // namespace sluice::detail
