// The engine's lifecycle: construction, init (pools, worker, the address exchange), the
// orderly close, the handler table, stats.
#include <unistd.h>

#include <algorithm>
#include <random>

#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>

#include "am/engine_core.h"
#include "core/log.h"
#include "core/net.h"

namespace sluice::detail {

namespace {

// Logs the TCP ports the worker opened (those listening now and not in `before`, that this
// process holds): in the common case nothing new listens, and no descriptor is looked at.
void log_ucx_ports(const ListenSockets& before, bool ucx_tcp, int engine_id) {
  // What the worker opened: UCX's TCP transport listens on one port per interface it uses.
  ListenSockets fresh = all_listening_tcp_sockets();
  std::erase_if(fresh, [&](const auto& s) {
    return std::any_of(before.begin(), before.end(), [&](const auto& b) { return b.first == s.first; });
  });
  std::vector<std::string> opened = held_here(fresh);
  if (opened.empty()) return;
  std::string ports = absl::StrJoin(opened, ", ");
  constexpr const char* kWhat =
      "engine %d: UCX's TCP transport listens on %s; it trusts whoever reaches these ports (UCX_NET_DEVICES and "
      "UCX_TCP_PORT_RANGE narrow them, SLUICE_UCX_TCP=n closes them: docs/security.md)";
  if (ucx_tcp) SLUICE_LOG(kInfo, "transport", kWhat, engine_id, ports);
  else SLUICE_LOG(kWarn, "transport", kWhat, engine_id, ports);
}

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
      eager_limit_(config.eager_limit()) {
  auto& s = stats_;
  c_ = EngineCounters{&s.counter("am.msgs_sent"),
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
                      &s.counter("rpc.window_refused"),
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
                      &s.counter("flow.credits_recovered"),
                      &s.counter("api.invalid_argument"),
                      &s.counter("rpc.overdue"),
                      &s.counter("api.messages_outlived_engine"),
                      &s.counter("am.unclaimed_dropped"),
                      &s.counter("flow.credits_lent"),
                      &s.counter("flow.credits_reclaimed"),
                      &s.counter("flow.credit_asks"),
                      &s.counter("flow.credits_refused"),
                      &s.counter("flow.peers_recalled"),
                      &s.counter("rpc.window_widened"),
                      &s.counter("rpc.window_reclaimed"),
                      &s.counter("am.receives_grown"),
                      &s.counter("peers.fifo_stalls"),
                      &s.counter("am.wakeups_missed")};
}

absl::Status EngineCore::init(const std::optional<NumaPolicy>& numa, std::string_view fault_at) {
  SLUICE_ASSIGN_OR_RETURN(FaultSpec fault, parse_fault_at(fault_at));
  if (fault.point != FaultPoint::kNone && !kFaultPointsBuilt) {
    SLUICE_LOG(kWarn, "config",
               "SLUICE_FAULT_AT=%s ignored: this library has no fault points (only the tests' libsluice-testing has)",
               fault_at);
  }
  fault_.arm(fault);
  if (config_.stats_trigger.any())
    live_ = std::make_unique<LiveStats>(config_.stats_trigger, config_.stats_dest, Clock::now());
  SLUICE_RETURN_IF_ERROR(connections_.load_key(config_));
  ListenSockets listening = all_listening_tcp_sockets();
  SLUICE_ASSIGN_OR_RETURN(worker_, Worker::create(*ucx_));
  log_ucx_ports(listening, ucx_->ucx_tcp(), engine_id_);
  SLUICE_ASSIGN_OR_RETURN(int node, choose_numa_node(numa.value_or(config_.numa), *topo_, current_cpu()));
  arena_source_ = {topo_, ucx_, node, config_.hugepages, config_.pool_chunk, &fault_};
  std::size_t slot = eager_slot_size(eager_limit_);
  SLUICE_ASSIGN_OR_RETURN(send_pool_, Pool::create(Direction::kSend, config_, slot, arena_source_));
  SLUICE_ASSIGN_OR_RETURN(recv_pool_, Pool::create(Direction::kRecv, config_, slot, arena_source_));
  SLUICE_RETURN_IF_ERROR(recv_pool_->eager().prime());

  int n = boot_->size();
  std::vector<std::string> addresses(static_cast<std::size_t>(n));
  std::string key = absl::StrFormat("sluice.engine.%d", engine_id_);
  SLUICE_RETURN_IF_ERROR(boot_->put(key, worker_->address()));
  SLUICE_RETURN_IF_ERROR(boot_->fence());
  for (int r = 0; r < n; ++r) {
    SLUICE_ASSIGN_OR_RETURN(addresses[static_cast<std::size_t>(r)], boot_->get(r, key));
  }
  // Every rank's Peer exists from here on (its endpoint and handshake wait for first use), so
  // that any thread may look one up: peer() reads a table nothing changes after this.
  peers_.add_ranks(std::move(addresses));
  initialized_ = true;
  SLUICE_LOG(kDebug, "am", "engine %d: rank %d of %d, pools on numa node %d, eager limit %u", engine_id_, rank(), n,
             node, eager_limit_);
  return absl::OkStatus();
}

EngineCore::~EngineCore() {
  if (!initialized_) {
    for (auto& op : ops_) op.slot.release();
    delete anchor_;
    return;  // init failed part-way: nothing was posted, no peer was contacted
  }
  // The last call on the engine, on whichever thread destroys it: that thread drives the close.
  (void)guard_.take_over("Engine::~Engine");
  shutting_down_ = true;
  auto deadline = Clock::now() + std::min<Duration>(config_.connect_timeout, std::chrono::seconds(5));
  rpc_client_.close();
  close_peers(deadline);
  close_transport(deadline);
  rpc_client_.clear();  // none is left (each peer's went when it failed); a reply waiting holds pool memory
  run_posted();         // Messages released on other threads meanwhile
  handlers_.drop_unclaimed();
  leave_kept_messages();
  if (live_ && live_->at_exit()) live_->write(stats_line("exit"));
  if (config_.stats) {
    std::string text = stats().to_text();
    std::fprintf(stderr, "sluice stats (rank %d, engine %d):\n%s", rank(), engine_id_, text.c_str());
  }
  worker_->progress();
}

// ---- a peer's failure ---------------------------------------------------------------------

void EngineCore::fail_peer(PeerData& p, absl::StatusCode code, const std::string& reason) {
  if (p.state() == PeerState::kDead) return;
  // A stream that failed knows why (a send failing right after it would only say "failed").
  if (std::string why = p.ep().failure(); code != absl::StatusCode::kCancelled && !why.empty() && why != reason) {
    fail_peer(p, absl::StatusCode::kUnavailable, why);
    return;
  }
  bool orderly = code == absl::StatusCode::kCancelled;
  if (!orderly) {
    c_.peers_failed->add();
    // The cause's code is named when it says more than the UNAVAILABLE the operations get.
    SLUICE_LOG(kWarn, "am", "peer %s failed%s: %s; its operations complete with UNAVAILABLE", p.name(),
               code == absl::StatusCode::kUnavailable ? "" : absl::StrFormat(" (%s)", absl::StatusCodeToString(code)),
               reason);
  } else {
    SLUICE_LOG(kDebug, "am", "peer %s closed: %s", p.name(), reason);
  }
  LinkControl::failed(p.link, reason);
  if (p.rank() < 0) connections_.close_link(p.id(), orderly);
  absl::Status status(orderly ? absl::StatusCode::kCancelled : absl::StatusCode::kUnavailable,
                      absl::StrFormat("peer %s: %s", p.name(), reason));
  // Queued messages never reached the transport: complete them here, once.
  sender_.drop_queued(p, status);
  rpc_client_.drop_waiting(p, status);
  // In-flight sends complete through the force close (their callbacks see an error), after a
  // flush that lets UCX finish the endpoint's wire-up (Worker::close_failed) when the peer is
  // alive (refused, closing): one dead or silent would hold the flush, and the engine, for
  // its whole bound, and answers no crossed wire-up request anyway...
  if (p.ep().valid()) {
    bool alive = code != absl::StatusCode::kUnavailable && code != absl::StatusCode::kDeadlineExceeded;
    void* req = worker_->close_failed(p.ep(), alive ? Duration(std::chrono::seconds(1)) : Duration::zero());
    if (req != nullptr)
      LinkControl::close_pending(
          p.link, absl::IsDeadlineExceeded(worker_->wait_request(req, Clock::now() + std::chrono::seconds(1))));
  }
  // ...except when UCX forgets some (seen with rendezvous sends to a dead shared-memory peer;
  // openucx/ucx#11154 reports the same): Sluice completes those itself, exactly once.
  sender_.complete_stuck(p, status);
  Delivery::drop_held(p);
  landings_.peer_failed(p);
  // Exact receives posted for this peer's payloads: cancel; their completions clean up.
  for (auto& op : ops_) {
    if ((op.kind == OpKind::kRndvRx || op.kind == OpKind::kReplyRx) && op.peer == p.id() && op.request != nullptr) {
      worker_->cancel(&op);
    }
  }
  // Calls to this peer complete now (those with a posted reply receive once it is cancelled).
  rpc_client_.end_calls(p, status);
  bank_.close(p);
  sender_.release_held(p);
  rpc_server_.grant(p, config_.rpc_window);
  peers_.gone(p);
}

// ---- the close, in phases ------------------------------------------------------------------

void EngineCore::close_peers(Clock::time_point deadline) {
  // Orderly close. First what was sent goes out: queued messages (as credits come back) and
  // in-flight ones, rendezvous payloads included, until the deadline...
  auto unsent = [&] {
    if (sender_.inflight() + control_.inflight() > 0) return true;
    // A connecting peer's queue goes out once its HELLO is in.
    return peers_.any([](const PeerData& p) {
      return (p.state() == PeerState::kReady || p.state() == PeerState::kConnecting) && p.tx.waiting();
    });
  };
  drain_while([&] { return unsent() || !submissions_.empty(); }, deadline);
  if (std::size_t left = submissions_.close(); left != 0)
    SLUICE_LOG(kWarn, "am", "engine %d closed with %u submitted attempt(s) still waiting (kWouldBlock): not run",
               engine_id_, left);
  // ...then BYE, carrying the last sequence sent, so that a peer closes only once it has all of
  // it; then a wait for the peers' own goodbyes, so no message arrives after the receives go.
  peers_.for_each([&](PeerData& p) {
    if (p.state() == PeerState::kReady) link_.send_bye(p);
  });
  // Ranks and clients get 500 ms (they may be busy elsewhere). A server we dialed answers once
  // it has read what we sent before our BYE, and our link closing first would make it fail us
  // and drop the rest: for it we wait until the close's deadline (or its failure).
  const Clock::time_point short_deadline = std::min(deadline, Clock::now() + std::chrono::milliseconds(500));
  auto sending = [&] { return sender_.inflight() + control_.inflight() > 0; };
  for (Clock::time_point now; (now = Clock::now()) < deadline;) {
    if (sending()) {
      drain_while(sending, deadline);  // a send waiting for room in a FIFO wakes nobody: polled
      continue;
    }
    bool servers_only = now >= short_deadline;
    if (!peers_.any(
            [&](const PeerData& p) { return p.state() == PeerState::kReady && (!servers_only || p.link.dialed()); }))
      break;
    // An answer wakes the engine: it sleeps until one comes or a timer is due, where polling
    // engines, hundreds closing at once, took the CPU their server needed to answer them.
    wait(servers_only ? deadline : short_deadline);
  }
  peers_.for_each([&](PeerData& p) {
    if (p.state() == PeerState::kReady && p.link.dialed() && !p.link.bye_received())
      SLUICE_LOG(kWarn, "am", "closing before %s answered our goodbye: it may not have handled all we sent", p.name());
    if (p.state() != PeerState::kDead) fail_peer(p, absl::StatusCode::kCancelled, "engine shutting down");
  });
}

void EngineCore::close_transport(Clock::time_point deadline) {
  closing_ = true;
  receives_.cancel_all();
  drain_while(
      [&] {
        return sender_.inflight() + control_.inflight() > 0 || exact_posted_ > 0 || !done_.empty() || receives_.busy();
      },
      deadline);
  // A peer that closes after its BYE wait here ran out answers late: what arrived on a closed
  // connection's tag is received and dropped as a straggler now, not left in UCX's unexpected
  // queue (UCX warns about each such message when the worker goes).
  worker_->progress();
  receives_.purge(Clock::time_point::min());
  drain_while([&] { return receives_.contacts_arriving() || !done_.empty(); }, deadline);
  // Every posted receive has completed (cancelled) now; remaining slots return with the ops.
  for (auto& op : ops_) {
    op.slot.release();
    op.pending = Message();
  }
  landings_.close();
  peers_.for_each([](PeerData& p) { Delivery::drop_held(p); });
  peers_.drop_endpoints();
  // Whatever waits unmatched (a failed peer's late messages, a goodbye that crossed
  // ours) is taken and dropped: nothing of this engine is left in UCX's unexpected queue.
  worker_->progress();
  receives_.drop_unmatched();
  drain_while([&] { return receives_.contacts_arriving() || !done_.empty(); }, deadline);
}

// ---- send slots, stats ----------------------------------------------------------------------

Result EngineCore::try_get_send_slot(std::size_t size, Slot* out) {
  PoolClass* cls = send_pool_->class_for(size);
  if (cls == nullptr)
    return guard_.invalid(absl::StrFormat(
        "try_get_send_slot(%u): larger than the send pool's largest class (SLUICE_POOL_CLASSES)", size));
  // A full class frees as sends complete and the application's slots come back.
  Result r = cls->try_get(out);
  if (r == Result::kWouldBlock) [[unlikely]] {
    c_.would_block->add();
    return Result::kWouldBlock;
  }
  return r;
}

std::string EngineCore::stats_line(const char* trigger) {
  std::string counters = stats().to_json();
  std::string line = absl::StrFormat("{\"time\": \"%s\", \"host\": \"%s\", \"pid\": %d, ", utc_timestamp(),
                                     json_escape(host_name()), static_cast<int>(::getpid()));
  if (boot_ != nullptr && boot_->size() > 1) absl::StrAppendFormat(&line, "\"rank\": %d, ", rank());
  if (int port = connections_.listen_port(); port >= 0) absl::StrAppendFormat(&line, "\"listen_port\": %d, ", port);
  absl::StrAppendFormat(&line, "\"engine\": %d, \"trigger\": \"%s\", \"counters\": %s, \"peers\": [", engine_id_,
                        trigger, counters);
  // The live peers busiest since the last line (a server with thousands of clients writes
  // eight), with their rates over that interval; gone ones are only counted. The exit line,
  // written once every peer is closed, lists them all.
  bool at_exit = std::string_view(trigger) == "exit";
  Clock::time_point now = Clock::now();
  double secs = std::chrono::duration<double>(now - last_line_at_).count();
  last_line_at_ = now;
  std::vector<PeerData*> live;
  std::size_t gone = 0;
  peers_.for_each([&](PeerData& p) {
    if (p.state() == PeerState::kDead && !at_exit) ++gone;
    else if (p.traffic.msgs_sent() != 0 || p.traffic.msgs_received() != 0) live.push_back(&p);
  });
  auto recent = [](const PeerData* p) { return p->traffic.bytes_since_line(); };
  std::size_t n = std::min<std::size_t>(live.size(), kStatsPeers);
  std::partial_sort(live.begin(), live.begin() + static_cast<std::ptrdiff_t>(n), live.end(),
                    [&](const PeerData* a, const PeerData* b) { return recent(a) > recent(b); });
  for (std::size_t i = 0; i < n; ++i) {
    const PeerData& p = *live[i];
    const PeerTraffic& t = p.traffic;
    absl::StrAppendFormat(&line,
                          "%s{\"peer\": \"%s\", \"state\": \"%s\", \"msgs_sent\": %u, \"bytes_sent\": %u, "
                          "\"msgs_received\": %u, \"bytes_received\": %u, \"credit_stalls\": %u, "
                          "\"credits_granted\": %u, \"credits_in_use\": %u, \"credits_wanted\": %u, "
                          "\"credits_held\": %u, \"msgs_per_s\": %.1f, \"bytes_per_s\": %.1f, \"rtt_us\": ",
                          i == 0 ? "" : ", ", json_escape(p.name()), to_string(p.state()), t.msgs_sent(),
                          t.bytes_sent(), t.msgs_received(), t.bytes_received(), t.credit_stalls(), p.rx.granted(),
                          p.rx.unreleased() + p.rx.owed().owed(), p.loan.wanted(), p.tx.credits().granted(),
                          secs > 0 ? static_cast<double>(t.msgs_since_line()) / secs : 0.0,
                          secs > 0 ? static_cast<double>(recent(&p)) / secs : 0.0);
    if (t.rtt().count() == 0) line += "null}";
    else absl::StrAppendFormat(&line, "%.1f}", std::chrono::duration<double, std::micro>(t.rtt()).count());
  }
  for (PeerData* p : live) p->traffic.mark_line();
  return line + absl::StrFormat("], \"peers_live\": %u, \"peers_gone\": %u, \"methods\": %s}", live.size(), gone,
                                methods_.to_json());
}

void EngineCore::leave_kept_messages() {
  std::size_t kept = anchor_->held.load(std::memory_order_acquire);
  if (kept == 0) {
    delete anchor_;
    return;
  }
  // The application still holds them. They become invalid and never touch this engine again
  // (the pools leave their slots only the descriptors); the last of them frees the anchor.
  c_.messages_outlived->add(kept);
  SLUICE_LOG(kError, "api",
             "engine %d destroyed while the application still holds %u received Message(s): they are invalid "
             "now (empty views), and their receive memory goes with the engine. Release every Message before "
             "destroying its engine",
             engine_id_, kept);
  anchor_->core = nullptr;
  anchor_ = nullptr;
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
  stats_.counter("am.tx_inflight").set(sender_.inflight() + control_.inflight());
  stats_.counter("api.wrong_thread").set(guard_.wrong_thread_calls());
  std::size_t held = 0, granted = 0, in_use = 0, from = 0, windows = 0, windows_from = 0;
  peers_.for_each([&](const PeerData& p) {
    if (p.state() != PeerState::kReady) return;
    held += p.rx.granted() != 0 && p.rx.unreleased() >= p.rx.granted() ? 1 : 0;
    granted += p.rx.granted();
    in_use += p.rx.unreleased() + p.rx.owed().owed();
    from += p.tx.credits().granted();
    windows += p.requests.capacity();
    windows_from += p.calls.window().granted();
  });
  stats_.counter("rpc.window_granted").set(windows);
  stats_.counter("rpc.window_held").set(windows_from);
  stats_.counter("flow.peers_held").set(held);
  stats_.counter("flow.credits_granted").set(granted);
  stats_.counter("flow.credits_in_use").set(in_use);
  stats_.counter("flow.credits_held").set(from);
  stats_.counter("flow.credit_reserve").set(recv_pool_->eager().reservable());
  stats_.counter("flow.peers_waiting_credits").set(bank_.waiting());
  stats_.counter("peers.table").set(peers_.size());
  stats_.counter("am.rx_exact_posted").set(exact_posted_);
  stats_.counter("am.landings_waiting").set(landings_.waiting());
  stats_.counter("am.unclaimed").set(handlers_.kept());
  return stats_;
}

PoolStats EngineCore::pool_stats(Direction d) const {
  return d == Direction::kSend ? send_pool_->stats() : recv_pool_->stats();
}

}  // namespace sluice::detail
