// Engine lifecycle, progress, op pool, timers, peer failure; the public forwarding layer.
#include "am/engine_core.h"
#include "core/probe.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <random>

#include <absl/strings/str_format.h>

#include "core/log.h"

namespace sluice::detail {

namespace {
std::uint64_t random_incarnation() {
  std::random_device rd;
  std::uint64_t v = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  return v == 0 ? 1 : v;
}
}  // namespace

EngineCore::EngineCore(const Config& config, const Topology* topo, const TransportContext* ucx, Bootstrap* boot,
                       int engine_id)
    : config_(config),
      topo_(topo),
      ucx_(ucx),
      boot_(boot),
      engine_id_(engine_id),
      incarnation_(random_incarnation()),
      eager_limit_(config.eager_limit()),
      handlers_(kMaxHandlers) {
  auto& s = stats_;
  c_ = Counters{&s.counter("am.msgs_sent"),
                &s.counter("am.bytes_sent"),
                &s.counter("am.msgs_received"),
                &s.counter("am.bytes_received"),
                &s.counter("am.rndv_sent"),
                &s.counter("am.rndv_received"),
                &s.counter("am.bounce_copied_bytes"),
                &s.counter("flow.credit_stalls"),
                &s.counter("flow.would_block"),
                &s.counter("wire.parse_errors"),
                &s.counter("am.duplicates_dropped"),
                &s.counter("am.dropped"),
                &s.counter("am.unknown_handler"),
                &s.counter("am.handler_errors"),
                &s.counter("peers.failed"),
                &s.counter("ctrl.sent"),
                &s.counter("ctrl.received"),
                &s.counter("flow.credit_messages"),
                &s.counter("peers.heartbeats"),
                &s.counter("rpc.calls"),
                &s.counter("rpc.replies"),
                &s.counter("rpc.late_replies"),
                &s.counter("rpc.slot_refused"),
                &s.counter("rpc.deadline_exceeded"),
                &s.counter("rpc.cancelled"),
                &s.high_water("flow.send_queue_hwm"),
                &s.counter("am.orphaned_sends"),
                &s.counter("am.coalesced"),
                &s.counter("am.sent_inline"),
                &s.counter("peers.reused"),
                &s.counter("am.copied_bytes"),
                &s.counter("am.sink_returned"),
                &s.counter("am.landing_waits"),
                &s.counter("flow.credits_recovered")};
}

absl::Status EngineCore::init(int numa_node_option) {
  SLUICE_ASSIGN_OR_RETURN(FaultSpec fault, parse_fault_at(config_.fault_at));
  if (fault.point != FaultPoint::kNone && !kFaultPointsBuilt) {
    SLUICE_LOG(kWarn, "config",
               "SLUICE_FAULT_AT=%s ignored: this library has no fault points (only the tests' libsluice-testing has)",
               config_.fault_at);
  }
  fault_.arm(fault);
  if (config_.stats_trigger.any())
    live_ = std::make_unique<LiveStats>(config_.stats_trigger, config_.stats_dest, Clock::now());
  if (config_.auth_mode() != AuthMode::kOff) {
    SLUICE_ASSIGN_OR_RETURN(key_, door::Key::load(config_.auth_key_file, "SLUICE_AUTH_KEY_FILE"));
  }
  SLUICE_ASSIGN_OR_RETURN(worker_, Worker::create(*ucx_));
  NumaPolicy policy = config_.numa;
  if (numa_node_option >= 0) policy = {NumaPolicy::Kind::kNode, numa_node_option};
  SLUICE_ASSIGN_OR_RETURN(int node, choose_numa_node(policy, *topo_, current_cpu()));
  arena_source_ = {topo_, ucx_, node, config_.hugepages, config_.pool_chunk, &fault_};
  std::size_t slot = eager_slot_size(eager_limit_);
  SLUICE_ASSIGN_OR_RETURN(send_pool_, Pool::create(Direction::kSend, config_, slot, arena_source_));
  SLUICE_ASSIGN_OR_RETURN(recv_pool_, Pool::create(Direction::kRecv, config_, slot, arena_source_));
  SLUICE_RETURN_IF_ERROR(recv_pool_->eager().prime());

  int n = boot_->size();
  ranks_ = n;
  peers_.resize(static_cast<std::size_t>(n));
  addresses_.resize(static_cast<std::size_t>(n));
  std::string key = absl::StrFormat("sluice.engine.%d", engine_id_);
  SLUICE_RETURN_IF_ERROR(boot_->put(key, worker_->address()));
  SLUICE_RETURN_IF_ERROR(boot_->fence());
  for (int r = 0; r < n; ++r) {
    SLUICE_ASSIGN_OR_RETURN(addresses_[static_cast<std::size_t>(r)], boot_->get(r, key));
  }
  initialized_ = true;
  SLUICE_LOG(kDebug, "am", "engine %d: rank %d of %d, pools on numa node %d, eager limit %u", engine_id_, rank(), n,
             node, eager_limit_);
  return absl::OkStatus();
}

EngineCore::~EngineCore() {
  if (!initialized_) {
    for (auto& op : op_storage_) op.slot.release();
    return;  // init failed part-way: nothing was posted, no peer was contacted
  }
  shutting_down_ = true;
  auto deadline = Clock::now() + std::min<Duration>(config_.connect_timeout, std::chrono::seconds(5));
  // Orderly close. First what was sent goes out: queued messages (as credits come back) and
  // in-flight ones, rendezvous payloads included, until the deadline...
  auto unsent = [&] {
    if (tx_inflight_ > 0) return true;
    for (auto& p : peers_)
      if (p && (p->state == PeerState::kReady || p->state == PeerState::kConnecting) &&
          (!p->queue.empty() || !p->call_queue.empty()))
        return true;  // a connecting peer's queue goes out once its HELLO is in
    return false;
  };
  while (unsent() && Clock::now() < deadline) progress();
  // ...then BYE, carrying the last sequence sent, so that a peer closes only once it has all of
  // it; then a short wait for the peers' own goodbyes, so no message arrives after the
  // receives go.
  for (auto& p : peers_) {
    if (p && p->state == PeerState::kReady) send_bye(*p);
  }
  auto bye_deadline = std::min(deadline, Clock::now() + std::chrono::milliseconds(500));
  auto live = [&] {
    for (auto& p : peers_)
      if (p && p->state == PeerState::kReady) return true;
    return false;
  };
  while ((tx_inflight_ > 0 || live()) && Clock::now() < bye_deadline) progress();
  for (auto& p : peers_) {
    if (p && p->state != PeerState::kDead) fail_peer(*p, absl::StatusCode::kCancelled, "engine shutting down");
  }
  closing_ = true;
  for (Op* op : rx_ops_) worker_->cancel(op);
  auto posted = [&] {
    for (Op* op : rx_ops_)
      if (op->request != nullptr) return true;
    return false;
  };
  while ((tx_inflight_ > 0 || exact_posted_ > 0 || contact_inflight_ > 0 || !done_.empty() || posted()) &&
         Clock::now() < deadline)
    progress();
  // A peer that closes after its BYE wait here ran out answers late: what arrived on a closed
  // connection's tag is received and dropped as a straggler now, not left in UCX's unexpected
  // queue (UCX warns about each such message when the worker goes).
  worker_->progress();
  purge_stragglers(Clock::time_point::min());
  while ((contact_inflight_ > 0 || !done_.empty()) && Clock::now() < deadline) progress();
  // Every posted receive has completed (cancelled) now; remaining slots return with the ops.
  for (auto& op : op_storage_) {
    op.slot.release();
    op.pending = Message();
  }
  parked_.clear();  // none is left (each peer's went when it failed); Messages hold pool memory
  for (auto& p : peers_) {
    if (!p) continue;
    p->window.clear();
    p->frag = Message();
    p->ep = Endpoint();
  }
  if (live_ && live_->at_exit()) live_->write(stats_line("exit"));
  if (config_.stats) {
    std::string text = stats().to_text();
    std::fprintf(stderr, "sluice stats (rank %d, engine %d):\n%s", rank(), engine_id_, text.c_str());
  }
  worker_->progress();
}

// ---- ops ---------------------------------------------------------------------------------

Op* EngineCore::new_op(OpKind kind, std::uint32_t peer) {
  Op* op = free_ops_;
  if (op != nullptr) [[likely]] {
    free_ops_ = op->next_free;
  } else {
    op = &op_storage_.emplace_back();
    op->engine = this;
    op->on_complete = &EngineCore::on_transport;
  }
  op->kind = kind;
  op->peer = peer;
  op->in_use = true;
  return op;
}

void EngineCore::free_op(Op* op) {
  if (op->pending.valid()) [[unlikely]]
    op->pending = Message();  // a request replied from (reply_own)
  op->slot.release();
  op->heap.reset();
  op->on_done = nullptr;
  op->payload = nullptr;
  op->payload_len = 0;
  op->payload_memh = nullptr;
  op->releases_rpc_slot = false;
  op->call_id = 0;
  op->tag = 0;
  op->orphaned = false;
  op->batchable = false;
  op->batch_count = 1;
  op->batch_last = 0;
  op->coalesced_tail = nullptr;
  op->request = nullptr;
  op->in_use = false;
  op->next_free = free_ops_;
  free_ops_ = op;
}

void EngineCore::on_transport(TransportOp* t, absl::StatusCode code, std::size_t length, Tag tag) {
  Op* op = static_cast<Op*>(t);
  op->engine->done_.push_back({op, code, length, tag});
}

void EngineCore::on_ep_error(void* arg, int ucs_status) {
  auto* p = static_cast<PeerData*>(arg);
  (void)ucs_status;
  // Recorded here, handled after progress returns: never change peer state inside UCX.
  p->fail_reason = absl::StrFormat("transport error: %s", transport_error_name(ucs_status));
  p->handle->engine_->failed_eps_.push_back(p->id);
}

void EngineCore::complete(Op* op, absl::StatusCode code, std::size_t length, std::uint64_t tag) {
  switch (op->kind) {
    case OpKind::kSend:
    case OpKind::kSendPayload: on_send_done(op, code); break;
    case OpKind::kCtrl: on_ctrl_done(op, code); break;
    case OpKind::kRx: on_rx(op, code, length, tag); break;
    case OpKind::kRndvRx: on_rndv_done(op, code, length); break;
    case OpKind::kReplyRx: on_reply_rx_done(op, code, length); break;
    case OpKind::kContactRx: on_contact_rx(op, code, length, tag); break;
  }
}

void EngineCore::drain_completions() {
  if (draining_) return;  // a handler progressing the engine: the outer loop drains
  draining_ = true;
  for (std::size_t i = 0; i < done_.size(); ++i) {
    Completion c = done_[i];
    if (c.op->kind == OpKind::kRx) [[likely]]
      on_rx(c.op, c.code, c.length, c.tag);
    else complete(c.op, c.code, c.length, c.tag);
  }
  done_.clear();
  draining_ = false;
  while (!failed_eps_.empty()) {
    std::uint32_t id = failed_eps_.back();
    failed_eps_.pop_back();
    PeerData& p = *peers_[id];
    if (p.state != PeerState::kDead) fail_peer(p, absl::StatusCode::kUnavailable, p.fail_reason);
  }
}

void EngineCore::run_posted() {
  std::vector<std::function<void()>> fns;
  {
    std::lock_guard lock(post_mu_);
    fns.swap(posted_);
    has_posted_.store(false, std::memory_order_relaxed);
  }
  for (auto& fn : fns) fn();
}

bool EngineCore::progress() {
  // The thread that drives the engine owns its pools' free lists (slots released elsewhere
  // come back through the pools' lock-free return path).
  if (!on_driver_thread()) [[unlikely]] {
    driver_tp_ = thread_pointer();
    send_pool_->set_owner(std::this_thread::get_id());
    recv_pool_->set_owner(std::this_thread::get_id());
  }
  // Receives consumed in the last call are re-posted here, before polling, rather than at
  // the end of it: a handler's reply, or the caller's next send after progress() returns,
  // then leaves before this bookkeeping instead of after it. (RX_POSTED receives stay posted
  // but for those consumed since; one arriving meanwhile waits in UCX until matched.)
  if (!unposted_.empty()) post_receives();
  if (!parked_.empty() && recv_pool_->returns() != parked_at_returns_) [[unlikely]]
    retry_landings();
  bool any = worker_->progress();
  if (!done_.empty()) {
    any = true;
    drain_completions();
  }
  if (has_posted_.load(std::memory_order_acquire)) [[unlikely]] {
    any = true;
    run_posted();
  }
  // Reading the clock is not free on every machine (a VM without a stable TSC pays a
  // system-call-like price): timers are checked every kTimerEvery calls.
  if (++since_timer_check_ >= kTimerEvery) [[unlikely]] {
    since_timer_check_ = 0;
    now_ = Clock::now();
    if (now_ >= next_timer_) timers(now_);
    if (door_ && now_ >= door_due_) {
      door_due_ = now_ + kDoorEvery;
      any = door_->poll(now_) || any;
    }
    take_first_contacts();
    if (!stale_tags_.empty()) purge_stragglers(now_);
    if (!parked_.empty()) retry_landings();  // room may come from slots given back elsewhere
  }
  probe::progress_end();
  return any;
}

void EngineCore::wait(Clock::time_point deadline) {
  since_timer_check_ = kTimerEvery;  // about to sleep: timers first
  if (progress()) return;
  if (!worker_->arm()) return;  // events pending: progress instead of sleeping
  if (has_posted_.load(std::memory_order_acquire)) return;
  sleep_until(std::min(deadline, next_timer_));
  progress();
}

void EngineCore::sleep_until(Clock::time_point until) {
  if (door_) until = std::min(until, door_->next_deadline());
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
  if (ms <= 0) ms = until > Clock::now() ? 1 : 0;  // under a millisecond: sleep one, not spin
  pollfd fds[2] = {{worker_->event_fd(), POLLIN, 0}, {door_ ? door_->fd() : -1, POLLIN, 0}};
  if (ms > 0) ::poll(fds, door_ ? 2 : 1, static_cast<int>(std::min<long long>(ms, 1000)));
  if (door_ && (fds[1].revents != 0 || Clock::now() >= door_->next_deadline())) {
    door_due_ = Clock::now() + kDoorEvery;
    (void)door_->poll(Clock::now());  // what it did is handled by the caller's next progress()
  }
}

void EngineCore::post(std::function<void()> fn) {
  {
    std::lock_guard lock(post_mu_);
    posted_.push_back(std::move(fn));
    has_posted_.store(true, std::memory_order_release);
  }
  worker_->signal();
}

// ---- timers: heartbeats, liveness, handshake and call deadlines -------------------------

void EngineCore::timers(Clock::time_point now) {
  Duration tick = std::max<Duration>(std::min<Duration>(config_.heartbeat / 4, std::chrono::milliseconds(50)),
                                     std::chrono::milliseconds(1));
  // With nothing to watch (no peer connecting or connected, no call waiting), an idle engine
  // need not wake for timers more than once a second.
  bool watching = !calls_.empty();
  for (auto& pp : peers_)
    watching = watching || (pp && (pp->state == PeerState::kConnecting || pp->state == PeerState::kReady));
  next_timer_ = now + (watching ? tick : Duration(std::chrono::seconds(1)));
  // Nobody progressed this engine for a while (a blocking fence, a busy application): what
  // its peers sent meanwhile was not heard, so that time does not count as their silence.
  bool away = now - last_timers_ > std::max<Duration>(2 * config_.heartbeat, std::chrono::seconds(2));
  last_timers_ = now;
  if (live_) [[unlikely]] {
    if (const char* why = live_->due(now)) live_->write(stats_line(why));
    next_timer_ = std::min(next_timer_, live_->next_due());
  }
  // By index: a completion callback run from fail_peer may progress the engine, and a client
  // admitted meanwhile grows peers_.
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    if (!peers_[i]) continue;
    PeerData& p = *peers_[i];
    if (p.state == PeerState::kConnecting && config_.connect_timeout != kInfinite && now >= p.hello_deadline) {
      fail_peer(
          p, absl::StatusCode::kDeadlineExceeded,
          absl::StrFormat("no handshake within SLUICE_CONNECT_TIMEOUT=%s", format_duration(config_.connect_timeout)));
      continue;
    }
    if (p.state == PeerState::kConnecting && p.early_since != Clock::time_point{} &&
        now - p.early_since >= config_.heartbeat) [[unlikely]] {
      drop_early(p);
      continue;
    }
    if (p.state != PeerState::kReady) continue;
    if (now - p.link_lost_at >= kLinkGrace) [[unlikely]] {
      fail_peer(p, absl::StatusCode::kUnavailable, p.fail_reason);
      continue;
    }
    if (away) p.last_heard = now;
    Duration silent = now - p.last_heard;
    if (config_.peer_timeout != kInfinite && silent >= config_.peer_timeout) {
      // What the flow looked like, for whoever has to tell a dead peer from a stuck protocol.
      PoolClassStats rx = recv_pool_->eager().stats();
      SLUICE_LOG(kWarn, "am",
                 "peer %s silent: our credits %u of %u, %u messages queued (%u entries), %u calls "
                 "queued; we hold %u of its messages unreleased and owe it %u credits; next "
                 "sequence from it %u, %u held early; %u of its %u receives posted (receive slots: %u of "
                 "%u in use, %u reserved), %u sends in flight; a message of it waits unmatched in UCX: %s",
                 p.name, p.credits.available(), p.credits.granted(), p.queued, p.queue.size(), p.call_queue.size(),
                 p.unreleased, p.owed.owed(), p.window.expected(), p.window.held(),
                 std::count_if(p.rx_ops.begin(), p.rx_ops.end(), [](const Op* op) { return op->busy; }),
                 p.rx_ops.size(), rx.slots_total - rx.slots_free, rx.slots_total, rx.reserved, tx_inflight_,
                 worker_->has_unexpected(wire::make_tag(wire::kEager, p.id, p.rx_key), kFullMask) ? "yes" : "no");
      fail_peer(p, absl::StatusCode::kUnavailable,
                absl::StrFormat("silent for %s (SLUICE_PEER_TIMEOUT=%s)",
                                format_duration(std::chrono::duration_cast<std::chrono::milliseconds>(silent)),
                                format_duration(config_.peer_timeout)));
      continue;
    }
    // Credits owed but below the explicit threshold go back on the next tick: a sender that
    // spent its window must not wait for traffic that may never come (delayed-ack timer).
    if (p.owed.owed() != 0) {
      c_.credit_msgs->add();
      send_ctrl(p, wire::kCredit, {});
    }
    if (silent >= config_.heartbeat && (!p.ping_outstanding || now - p.ping_sent >= config_.heartbeat)) {
      p.ping_outstanding = true;
      p.ping_sent = now;
      c_.heartbeats->add();
      send_ctrl(p, wire::kPing, {});
    }
  }
  if (!calls_.empty()) expire_calls(now);
}

// ---- peers ---------------------------------------------------------------------------------

PeerData* EngineCore::create_rank_peer(int rank) {
  auto& slot = peers_[static_cast<std::size_t>(rank)];
  slot = std::make_unique<PeerData>();
  slot->id = static_cast<std::uint32_t>(rank);
  slot->rank = rank;
  slot->name = absl::StrFormat("rank %d", rank);
  slot->handle.reset(new Peer(this, slot.get(), slot->id, rank));
  slot->server_slots = SlotTable(config_.rpc_slots);
  slot->remote_slot = static_cast<std::uint32_t>(this->rank());
  return slot.get();
}

PeerData* EngineCore::peer_by_slot_slow(std::uint32_t slot) {
  if (slot < static_cast<std::uint32_t>(ranks_)) return peer_by_rank(static_cast<int>(slot));
  return nullptr;
}

Peer* EngineCore::peer(int rank) {
  PeerData* p = peer_by_rank(rank);
  return p ? p->handle.get() : nullptr;
}

Peer* EngineCore::peer_handle(std::uint32_t id) { return peers_[id]->handle.get(); }

absl::Status EngineCore::ensure_endpoint(PeerData& p) {
  if (p.ep.valid()) return absl::OkStatus();
  if (p.rank < 0) return absl::UnavailableError("client/server peer without an endpoint");
  SLUICE_ASSIGN_OR_RETURN(p.ep, worker_->connect(addresses_[p.id], &EngineCore::on_ep_error, &p));
  return absl::OkStatus();
}

void EngineCore::fail_peer(PeerData& p, absl::StatusCode code, const std::string& reason) {
  if (p.state == PeerState::kDead) return;
  bool orderly = code == absl::StatusCode::kCancelled;
  if (!orderly) {
    c_.peers_failed->add();
    SLUICE_LOG(kWarn, "am", "peer %s failed: %s; its operations complete with %s", p.name, reason,
               absl::StatusCodeToString(code));
  } else {
    SLUICE_LOG(kDebug, "am", "peer %s closed: %s", p.name, reason);
  }
  p.state = PeerState::kDead;
  p.fail_reason = reason;
  p.link_lost_at = Clock::time_point::max();
  if (p.rank < 0 && door_) door_->close_link(p.id);
  absl::Status status(orderly ? absl::StatusCode::kCancelled : absl::StatusCode::kUnavailable,
                      absl::StrFormat("peer %s: %s", p.name, reason));
  // Queued messages never reached the transport: complete them here, once.
  p.queued = 0;
  for (auto* q : {&p.queue, &p.call_queue}) {
    while (!q->empty()) {
      Pending m = q->front();
      q->pop_front();
      Op* last = m.payload ? m.payload : m.header;
      if (last->on_done) last->on_done(status);
      if (last->releases_rpc_slot) release_call_slot(p);
      complete_coalesced(m.header, status, false);  // sends that joined it in the queue
      free_op(m.header);
      if (m.payload) free_op(m.payload);
    }
  }
  // In-flight sends complete through the force close (their callbacks see an error)...
  if (p.ep.valid()) {
    void* req = p.ep.start_close(true);
    if (req != nullptr)
      p.close_pending = absl::IsDeadlineExceeded(worker_->wait_request(req, Clock::now() + std::chrono::seconds(1)));
  }
  // ...except when UCX forgets some (seen with rendezvous sends to a dead shared-memory peer;
  // openucx/ucx#11154 reports the same): Sluice completes those itself, exactly once.
  complete_stuck_sends(p, status);
  p.window.clear();
  p.frag = Message();
  drop_parked(p);
  p.blocked = false;
  // Exact receives posted for this peer's payloads: cancel; their completions clean up.
  for (auto& op : op_storage_) {
    if ((op.kind == OpKind::kRndvRx || op.kind == OpKind::kReplyRx) && op.peer == p.id && op.request != nullptr) {
      worker_->cancel(&op);
    }
  }
  // Calls to this peer complete now (those with a posted reply receive once it is cancelled).
  for (CallId id : calls_.ids_where([&](const Call& c) { return c.peer == p.id; })) finish_call(id, status);
  close_receives(p);
  if (p.granted != 0) {
    recv_pool_->eager().unreserve(p.granted + p.rx_reserved);
    p.granted = 0;
    p.rx_reserved = 0;
  }
  if (p.reply_reserved != 0) {
    send_pool_->eager().unreserve(p.reply_reserved);
    p.reply_reserved = 0;
  }
  p.server_slots = SlotTable(config_.rpc_slots);
  p.calls_outstanding = 0;
  if (p.rank < 0) gone_cs_.push_back(p.id);
}

void EngineCore::complete_stuck_sends(PeerData& p, const absl::Status& status) {
  auto stuck = [&](const Op& op) {
    return (op.kind == OpKind::kSend || op.kind == OpKind::kSendPayload) && op.peer == p.id && op.request != nullptr &&
           !op.orphaned;
  };
  bool any = false;
  for (auto& op : op_storage_) {
    if (stuck(op)) {
      worker_->cancel(&op);
      any = true;
    }
  }
  if (!any) return;
  for (int i = 0; i < 100; ++i) worker_->progress();
  for (auto& op : op_storage_) {
    if (!stuck(op)) continue;
    op.orphaned = true;
    --tx_inflight_;
    c_.orphaned_sends->add();
    SLUICE_LOG_RATE_LIMITED(
        kWarn, "am", "peer %s: the transport did not complete a send to the dead peer; completed by sluice", p.name);
    if (op.on_done) {
      SendCallback cb = std::move(op.on_done);
      op.on_done = nullptr;
      cb(status);
    }
    if (op.releases_rpc_slot) op.releases_rpc_slot = false;
    complete_coalesced(&op, status, false);
    // Its pool slot goes back now ("pools full again" must not wait for a callback that may
    // never come). The endpoint is closed, so the transport sends nothing more from it, and
    // pool memory stays mapped while the engine lives, so even a late read would be harmless.
    // (A heap copy is kept until the callback: that memory could be unmapped; so is a request's
    // landing, which the receive pool unmaps when another class needs the room.)
    op.slot.release();
    if (op.pending.valid() && !op.pending.heap_ && !op.pending.landing_) op.pending = Message();  // its eager slot
  }
}

void EngineCore::drop_early(PeerData& p) {
  // Over UCX a peer's HELLO is in before the data it sent after it: one that has not come
  // within a heartbeat interval is not coming, and what waited for it goes.
  for (std::size_t n = p.window.held(); n > 0; --n) count_drop("before the handshake (no HELLO came)");
  p.window.clear();  // their Messages release their slots and credits
  p.early_since = {};
}

void EngineCore::count_drop(const char* what) {
  c_.dropped_dead->add();
  SLUICE_LOG_RATE_LIMITED(kInfo, "am", "dropped a message: %s", what);
}

// ---- handlers, stats ------------------------------------------------------------------------

absl::Status EngineCore::register_handler(HandlerId id, Handler fn, HandlerOptions options) {
  if (id >= kMaxHandlers) {
    return absl::InvalidArgumentError(absl::StrFormat("handler id %d is not below %d", id, kMaxHandlers));
  }
  if (!fn) return absl::InvalidArgumentError("empty handler function");
  if (handlers_[id].fn) return absl::AlreadyExistsError(absl::StrFormat("handler %d is already registered", id));
  handlers_[id] = {std::move(fn), std::move(options)};
  return absl::OkStatus();
}

absl::Status EngineCore::unregister_handler(HandlerId id) {
  if (id >= kMaxHandlers || !handlers_[id].fn) {
    return absl::NotFoundError(absl::StrFormat("no handler %d is registered", id));
  }
  handlers_[id] = {};
  return absl::OkStatus();
}

Result EngineCore::try_get_send_slot(std::size_t size, Slot* out) {
  PoolClass* cls = send_pool_->class_for(size);
  if (cls == nullptr) return Result::kInvalidArgument;
  return cls->try_get(out);
}

std::string EngineCore::stats_line(const char* trigger) {
  std::string counters = stats().to_json();
  std::string line = absl::StrFormat("{\"time\": \"%s\", \"host\": \"%s\", \"pid\": %d, ", utc_timestamp(),
                                     json_escape(host_name()), static_cast<int>(::getpid()));
  if (boot_ != nullptr && boot_->size() > 1) absl::StrAppendFormat(&line, "\"rank\": %d, ", rank());
  if (listen_port_ >= 0) absl::StrAppendFormat(&line, "\"listen_port\": %d, ", listen_port_);
  absl::StrAppendFormat(&line, "\"engine\": %d, \"trigger\": \"%s\", \"counters\": %s, \"peers\": [", engine_id_,
                        trigger, counters);
  // The busiest peers by bytes both ways; a server with thousands of clients writes eight.
  std::vector<const PeerData*> busy;
  for (const auto& p : peers_)
    if (p && (p->traffic.msgs_sent != 0 || p->traffic.msgs_received != 0)) busy.push_back(p.get());
  auto bytes = [](const PeerData* p) { return p->traffic.bytes_sent + p->traffic.bytes_received; };
  std::size_t n = std::min<std::size_t>(busy.size(), kStatsPeers);
  std::partial_sort(busy.begin(), busy.begin() + static_cast<std::ptrdiff_t>(n), busy.end(),
                    [&](const PeerData* a, const PeerData* b) { return bytes(a) > bytes(b); });
  for (std::size_t i = 0; i < n; ++i) {
    const PeerData& p = *busy[i];
    const PeerTraffic& t = p.traffic;
    absl::StrAppendFormat(&line,
                          "%s{\"peer\": \"%s\", \"state\": \"%s\", \"msgs_sent\": %u, \"bytes_sent\": %u, "
                          "\"msgs_received\": %u, \"bytes_received\": %u, \"credit_stalls\": %u, \"rtt_us\": ",
                          i == 0 ? "" : ", ", json_escape(p.name), to_string(p.state), t.msgs_sent, t.bytes_sent,
                          t.msgs_received, t.bytes_received, t.credit_stalls);
    if (t.rtt.count() == 0) line += "null}";
    else absl::StrAppendFormat(&line, "%.1f}", std::chrono::duration<double, std::micro>(t.rtt).count());
  }
  return line + "]}";
}

const Stats& EngineCore::stats() {
  for (auto* pool : {send_pool_.get(), recv_pool_.get()}) {
    PoolStats ps = pool->stats();
    std::string d = to_string(ps.direction);
    stats_.counter("mem." + d + ".mapped_bytes").set(ps.mapped_bytes);
    stats_.counter("mem." + d + ".hwm_bytes").set(ps.high_water_bytes);
    for (const auto& c : ps.classes) {
      std::string base = "mem." + c.name;
      stats_.counter(base + ".slots_total").set(c.slots_total);
      stats_.counter(base + ".slots_free").set(c.slots_free);
      stats_.counter(base + ".hwm").set(c.high_water);
      stats_.counter(base + ".growth").set(c.growth_events);
      stats_.counter(base + ".exhausted").set(c.exhaustion_events);
      stats_.counter(base + ".cross_thread_returns").set(c.cross_thread_returns);
    }
  }
  stats_.counter("am.tx_inflight").set(tx_inflight_);
  stats_.counter("peers.table").set(peers_.size());
  stats_.counter("am.rx_exact_posted").set(exact_posted_);
  stats_.counter("am.landings_waiting").set(parked_.size());
  return stats_;
}

PoolStats EngineCore::pool_stats(Direction d) const {
  return d == Direction::kSend ? send_pool_->stats() : recv_pool_->stats();
}

}  // namespace sluice::detail
