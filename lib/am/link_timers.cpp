// Link control's timers: the handshake's deadline, data waiting for a HELLO, a closed link's
// grace, silence, heartbeats; and what the rest of the engine tells it about a link.
#include <algorithm>

#include <absl/strings/str_format.h>

#include "am/engine_core.h"
#include "core/log.h"

namespace sluice::detail {

bool LinkControl::expired(PeerData& p, Clock::time_point now, bool away) {
  if (p.state() == PeerState::kConnecting && engine().config_.connect_timeout != kInfinite &&
      now >= p.link.hello_deadline_) {
    engine().fail_peer(p, absl::StatusCode::kDeadlineExceeded,
                       absl::StrFormat("no handshake within SLUICE_CONNECT_TIMEOUT=%s",
                                       format_duration(engine().config_.connect_timeout)));
    return true;
  }
  if (p.state() == PeerState::kConnecting && p.link.early_since_ != Clock::time_point{} &&
      now - p.link.early_since_ >= engine().config_.heartbeat) [[unlikely]] {
    drop_early(p);
    return true;
  }
  if (p.state() != PeerState::kReady) return false;
  if (now - p.link.lost_at_ >= Connections::kLinkGrace) [[unlikely]] {
    engine().fail_peer(p, absl::StatusCode::kUnavailable, p.link.fail_reason_);
    return true;
  }
  if (away) p.link.last_heard_ = now;
  Duration silent = now - p.link.last_heard_;
  // A peer told our BYE while we close is waited for until the close's deadline, not failed
  // for silence: a server behind a storm of closes answers late, and failing it would close
  // our link before it read our last messages.
  bool closing = p.link.bye_sent_ && engine().shutting_down_;
  if (engine().config_.peer_timeout != kInfinite && silent >= engine().config_.peer_timeout && !closing) {
    // What the flow looked like, for whoever has to tell a dead peer from a stuck protocol.
    PoolClassStats rx = engine().recv_pool_->eager().stats();
    SLUICE_LOG(kWarn, "am",
               "peer %s silent: our credits %u of %u, %u messages queued (%u entries), %u calls "
               "queued; we hold %u of its messages unreleased and owe it %u credits; next "
               "sequence from it %u, %u held early; %u of its %u receives posted, %u parked (its receive "
               "slots: %u held; the pool's: %u of %u in use, %u reserved), %u sends in flight; a "
               "message of it waits unmatched in UCX: %s",
               p.name(), p.tx.credits().available(), p.tx.credits().granted(), p.tx.queued(), p.tx.entries(),
               p.calls.queued(), p.rx.unreleased(), p.rx.owed().owed(), p.rx.window().expected(), p.rx.window().held(),
               std::count_if(p.posted.ops().begin(), p.posted.ops().end(), [](const Op* op) { return op->recv.busy; }),
               p.posted.want(), p.posted.parked(), p.posted.held(), rx.slots_total - rx.slots_free, rx.slots_total,
               rx.reserved, engine().sender_.inflight() + engine().control_.inflight(),
               engine().worker_->has_unexpected(wire::make_tag(wire::kEager, p.id(), p.posted.key()), kFullMask)
                   ? "yes"
                   : "no");
    engine().fail_peer(p, absl::StatusCode::kUnavailable,
                       absl::StrFormat("silent for %s (SLUICE_PEER_TIMEOUT=%s)",
                                       format_duration(std::chrono::duration_cast<std::chrono::milliseconds>(silent)),
                                       format_duration(engine().config_.peer_timeout)));
    return true;
  }
  return false;
}

void LinkControl::keep_alive(PeerData& p, Clock::time_point now) {
  // Up to half a batch early, so that the batch boundary a quiet peer sleeps until finds it due.
  const Duration after = beat(p.link) - batch() / 2;
  if (now - p.link.last_heard_ >= after && (!p.link.ping_outstanding_ || now - p.link.ping_sent_ >= after)) {
    p.link.ping_outstanding_ = true;
    p.link.ping_sent_ = now;
    engine().c_.heartbeats->add();
    engine().control_.send(p, wire::kPing, {});
  }
}

void LinkControl::drop_early(PeerData& p) {
  // Over UCX a peer's HELLO is in before the data it sent after it: one that has not come
  // within a heartbeat interval is not coming, and what waited for it goes.
  for (std::size_t n = p.rx.window().held(); n > 0; --n) engine().c_.dropped("before the handshake (no HELLO came)");
  Delivery::drop_held(p);  // their Messages release their slots and credits
  p.link.early_since_ = {};
}

void LinkControl::endpoint_failed(LinkState& l, std::string why) {
  // A link that closed already said why (the client's process ended); the endpoint follows.
  if (!l.lost()) l.fail_reason_ = std::move(why);
}

bool LinkControl::link_lost(PeerData& p, const std::string& why, Clock::time_point now) {
  p.link.fail_reason_ = why;
  if (p.state() != PeerState::kReady) return false;
  p.link.lost_at_ = now;  // its BYE may still be on its way
  watch(p.link, p.id());
  return true;
}

void LinkControl::watch_index(std::uint32_t index) {
  visits_.watch(index);
  engine().watch_timers();
}

void LinkControl::tick(Clock::time_point now, bool away, absl::FunctionRef<bool(PeerData&)> visit) {
  visits_.tick(now, [&](std::uint32_t index) {
    PeerData* p = engine().peers_.by_index(index);
    if (p == nullptr) return VisitSchedule::kForget;
    bool done = expired(*p, now, away);
    bool quiet = !done && p->state() == PeerState::kReady && visit(*p);
    if (p->state() == PeerState::kDead) {
      p->link.watched_ = false;
      return VisitSchedule::kForget;
    }
    if (!quiet || p->state() != PeerState::kReady || p->link.lost() || p->link.early_since_ != Clock::time_point{})
      return VisitSchedule::kWatch;
    p->link.watched_ = false;  // a message, a queue or a lost link watches it again
    return quiet_until(p->link);
  });
}

Clock::time_point LinkControl::quiet_until(const LinkState& l) const {
  // The next ping's time (keep_alive), rounded up to a batch boundary: the pings of all quiet
  // peers leave in four batches per heartbeat interval, each one wake-up of the engine.
  const Config& c = engine().config_;
  const Duration q = batch();
  const Duration after = beat(l) - q / 2;
  Clock::time_point due = l.last_heard_ + after;
  if (l.ping_outstanding_) due = std::max(due, l.ping_sent_ + after);
  due = Clock::time_point((due.time_since_epoch() + q - Duration(1)) / q * q);
  if (c.peer_timeout != kInfinite) due = std::min(due, l.last_heard_ + c.peer_timeout);
  return due;
}

Duration LinkControl::batch() const {
  return std::max<Duration>(engine().config_.heartbeat / 4, std::chrono::milliseconds(1));
}

Duration LinkControl::beat(const LinkState& l) const {
  // A server pings its quiet clients: SLUICE_HEARTBEAT apart, or further with more peers than
  // SLUICE_HEARTBEAT_RATE allows (within a third of SLUICE_PEER_TIMEOUT). Its pings leave in
  // batches and their answers come back together; a client's own pings would wake it once each
  // (measured: 1,000 idle clients pinging in turn held a server at 3.1-3.5 % of a core). So a
  // client pings only after half its SLUICE_PEER_TIMEOUT of silence.
  const Config& c = engine().config_;
  const bool timeout = c.peer_timeout != kInfinite;
  if (l.dialed_) return timeout ? std::max(c.heartbeat, c.peer_timeout / 2) : 2 * c.heartbeat;
  Duration spread =
      Duration(std::chrono::seconds(1)) * static_cast<std::int64_t>(engine().peers_.live()) / c.heartbeat_rate;
  Duration longest = std::max(c.heartbeat, timeout ? c.peer_timeout / 3 : spread);
  return std::clamp(spread, c.heartbeat, longest);
}

void LinkControl::failed(LinkState& l, const std::string& reason) {
  l.state_ = PeerState::kDead;
  l.fail_reason_ = reason;
  l.lost_at_ = Clock::time_point::max();
}

}  // namespace sluice::detail
