// The engine loop: progress, sleeping, work posted from other threads, timers (deadlines,
// heartbeats, credit ticks, liveness), and the completions of operations.
#include <poll.h>
#include <unistd.h>

#include <algorithm>

#include <absl/strings/str_format.h>

#include "am/engine_core.h"
#include "core/log.h"
#include "core/probe.h"

namespace sluice::detail {

void EngineCore::on_transport(TransportOp* t, absl::StatusCode code, std::size_t length, Tag tag) {
  Op* op = static_cast<Op*>(t);
  op->engine->done_.push(op, code, length, tag);
}

void EngineCore::complete(Op* op, absl::StatusCode code, std::size_t length, std::uint64_t tag) {
  switch (op->kind) {
    case OpKind::kSend:
    case OpKind::kSendPayload: sender_.on_send_done(op, code); break;
    case OpKind::kCtrl: control_.on_done(op, code); break;
    case OpKind::kRx: delivery_.on_rx(op, code, length, tag); break;
    case OpKind::kRndvRx: landings_.on_rndv_done(op, code, length); break;
    case OpKind::kReplyRx: rpc_client_.on_reply_rx_done(op, code, length); break;
    case OpKind::kContactRx: receives_.on_contact_rx(op, code, length, tag); break;
  }
}

void EngineCore::drain_completions() {
  if (draining_) return;  // a handler progressing the engine: the outer loop drains
  draining_ = true;
  for (std::size_t i = 0; i < done_.size(); ++i) {
    Completion c = done_[i];
    if (c.op->kind == OpKind::kRx) [[likely]]
      delivery_.on_rx(c.op, c.code, c.length, c.tag);
    else complete(c.op, c.code, c.length, c.tag);
  }
  done_.clear();
  draining_ = false;
  if (peers_.endpoints_failed()) [[unlikely]]
    connections_.endpoints_failed();
}

void EngineCore::run_posted() {
  std::vector<absl::AnyInvocable<void()>> fns;
  {
    std::lock_guard lock(post_mu_);
    fns.swap(posted_);
    has_posted_.store(false, std::memory_order_relaxed);
  }
  for (auto& fn : fns) fn();
  (void)submissions_.run();  // after the flag is cleared: a submit() meanwhile sets it again
}

bool EngineCore::progress() {
  if (!guard_.bound_here()) [[unlikely]] {
    if (!guard_.bind("Engine::progress")) return false;
  }
  // Receives consumed in the last call are re-posted here, before polling, rather than at
  // the end of it: a handler's reply, or the caller's next send after progress() returns,
  // then leaves before this bookkeeping instead of after it. (A peer's receives stay posted
  // but for those consumed since; one arriving meanwhile waits in UCX until matched, and
  // the receive that finds it brings one more: Receives.)
  receives_.post();
  landings_.retry(false);
  // Reading the clock is not free on every machine (a VM without a stable TSC pays a
  // system-call-like price): timers are checked every kTimerEvery calls. They judge peers'
  // silence, so that pass reads the streams too, however quiet (StreamHub::progress).
  const bool timers_due = ++since_timer_check_ >= kTimerEvery;
  if (timers_due) [[unlikely]]
    worker_->streams_woke(true);
  bool any = worker_->progress();
  if (!done_.empty()) {
    any = true;
    // What handlers send meanwhile leaves in one write per stream peer, at the end.
    worker_->hold_sends();
    // The first message after a sleep that ran out (or was ended by another fd) may have come
    // with a wake-up datagram: read it now, not at the next sleep, which may never come.
    if (worker_->armed()) [[unlikely]]
      worker_->drain_wakeups();
    drain_completions();
    if (submissions_.retrying()) [[unlikely]]
      (void)submissions_.run();  // a completion may have made room for the one that would block
    worker_->release_sends();
  }
  if (has_posted_.load(std::memory_order_acquire)) [[unlikely]] {
    any = true;
    run_posted();
  }
  if (timers_due) [[unlikely]]
    any = check_clock() || any;
  probe::progress_end();
  return any;
}

bool EngineCore::check_clock() {
  since_timer_check_ = 0;
  now_ = Clock::now();
  bool any = false;
  // The door first: a link that closed names the cause before its grace ends (timers()).
  any = connections_.poll_due(now_);
  if (now_ >= next_timer_) timers(now_);
  receives_.take_first_contacts();
  // An endpoint that failed in a pass that completed nothing (a stream's peer closing).
  if (peers_.endpoints_failed()) drain_completions();
  receives_.purge(now_);
  landings_.retry(true);  // room may come from slots given back elsewhere
  return any;
}

bool EngineCore::wait(Clock::time_point deadline) {
  if (!guard_.bound_here() && !guard_.bind("Engine::wait")) return false;
  since_timer_check_ = kTimerEvery;  // about to sleep: timers first
  if (progress()) return false;
  // A refused arm has read what was pending, most often the wake-up datagram of the last
  // sleep, whose message was handled then: one more pass, and a second arm, before giving
  // the sleep up (the caller would otherwise spin again first).
  if (!worker_->arm() && (progress() || !worker_->arm())) return false;
  if (has_posted_.load(std::memory_order_acquire)) return false;
  bool woken = sleep_until(std::min(deadline, next_timer_));
  std::uint64_t heard = c_.msgs_received->value() + c_.ctrl_received->value();
  progress();
  // A message that was there when the sleep ran out: its sender's wake-up never came.
  if (!woken && c_.msgs_received->value() + c_.ctrl_received->value() != heard) c_.wakeups_missed->add();
  return true;
}

bool EngineCore::sleep_until(Clock::time_point until) {
  until = std::min(until, connections_.next_deadline());
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
  if (ms <= 0) ms = until > Clock::now() ? 1 : 0;  // under a millisecond: sleep one, not spin
  pollfd fds[3] = {{worker_->event_fd(), POLLIN, 0}, {connections_.fd(), POLLIN, 0}, {worker_->stream_fd(), POLLIN, 0}};
  int ready = 1;  // not slept: nothing ran out
  if (ms > 0) {
    ready = ::poll(fds, 3, static_cast<int>(std::min<long long>(ms, 1000)));
    // Ran out, and was not run at once: a wake-up may have come meanwhile (it counts as one).
    if (ready == 0) ready = ::poll(fds, 1, 0);
    if (fds[0].revents != 0) worker_->drain_wakeups();  // read now: this engine may not sleep (arm) again soon
    worker_->streams_woke(fds[2].revents != 0);
  }
  connections_.woke(fds[1].revents != 0);
  return ready != 0;
}

Result EngineCore::submit(Submissions::Attempt&& attempt, Clock::time_point deadline) {
  // The engine thread waiting for room only it can make would wait forever.
  if (guard_.bound_here(std::memory_order_acquire)) deadline = Clock::time_point::min();
  // One wake-up per batch: a producer that finds the flag set leaves the signal to the one
  // that set it (the engine clears the flag before it takes what was queued).
  return submissions_.push(std::move(attempt), deadline, [this] {
    if (!has_posted_.exchange(true, std::memory_order_acq_rel)) worker_->signal();
  });
}

void EngineCore::post(absl::AnyInvocable<void()> fn) {
  {
    std::lock_guard lock(post_mu_);
    posted_.push_back(std::move(fn));
    has_posted_.store(true, std::memory_order_release);
  }
  worker_->signal();
}

// ---- timers: heartbeats, liveness, handshake and call deadlines -------------------------

void EngineCore::timers(Clock::time_point now) {
  Duration tick = timer_tick(config_);
  next_timer_ = now + tick;  // a callback that progresses the engine meanwhile does not tick again
  // Nobody progressed this engine for a while (a blocking fence, a busy application): what
  // its peers sent meanwhile was not heard, so that time does not count as their silence.
  bool away = now - last_timers_ > std::max<Duration>(2 * config_.heartbeat, std::chrono::seconds(2));
  last_timers_ = now;
  worker_->drain_wakeups();  // those of wake-ups while this engine was already awake
  if (live_) [[unlikely]] {
    if (const char* why = live_->due(now)) live_->write(stats_line(why));
  }
  // The watched peers and the quiet ones whose heartbeat or silence came (LinkControl::tick).
  link_.tick(now, away, [&](PeerData& p) {
    delivery_.watch_held(p, now);
    sender_.watch_starved(p, now);
    // Credits owed but below the explicit threshold go back on the next tick: a sender that
    // spent its window must not wait for traffic that may never come (delayed-ack timer).
    if (p.rx.owed().owed() != 0) control_.return_credits(p);
    link_.keep_alive(p, now);
    return p.rx.unreleased() == 0 && p.rx.owed().owed() == 0 && p.tx.queued() == 0;
  });
  bank_.tick(now);
  rpc_client_.expire(now);
  connections_.watch_fifo(now);
  // Nothing watched, no call waiting, no loan to settle: the next tick is the earliest sleeper's deadline, at
  // least a tick and at most a second away.
  if (!link_.busy() && rpc_client_.idle() && !bank_.busy())
    next_timer_ = std::clamp(link_.next_due(), now + tick, now + std::chrono::seconds(1));
  if (live_) [[unlikely]]
    next_timer_ = std::min(next_timer_, live_->next_due());
}

}  // namespace sluice::detail
