// The sender's credits: granted, returned, lent and given back; a failed peer's sends end.
#include <absl/strings/str_format.h>

#include "am/engine_core.h"
#include "core/log.h"

namespace sluice::detail {

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

bool Sender::on_loan(PeerData& p, const wire::Grant& g) {
  std::uint64_t lent = p.tx.credits_.lent();
  if (!p.tx.credits_.loan(g.lent, g.target)) return false;
  if (p.tx.credits_.lent() != lent) p.tx.asked_ = false;  // lent more: ask again if still short
  settle(p);
  return true;
}

void Sender::settle(PeerData& p) {
  if (!p.tx.credits_.above_target()) [[likely]]
    return;
  // The queue's next tagged message may need several credits: never give up below those.
  std::uint32_t keep = p.tx.queue_.empty() ? 0 : p.tx.queue_.front().header->send.batch_count;
  if (p.tx.credits_.settle(keep) != 0) engine().control_.send_grant(p);
}

void Sender::ask(PeerData& p) {
  if (p.tx.asked_ || p.state() != PeerState::kReady) return;
  p.tx.asked_ = true;
  engine().control_.send_grant(p);
}

void Sender::watch_starved(PeerData& p, Clock::time_point now) {
  p.tx.asked_ = false;  // at most one ask per tick
  settle(p);
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
