// The engine (internal): the composition root of its components, owned by one thread. Its
// own declarations and its components, by the file that implements them:
//   lifecycle.cpp   construction, init, a peer's failure, the orderly close, stats
//   loop.cpp        progress, sleeping, posted work, timers, completions
//   peer_table.cpp  PeerTable: rank and client/server peers, rank endpoints (peer_table.h)
//   connections.cpp Connections: the front door's engine side: listen, connect, admission
//   link_control.cpp LinkControl: HELLO, BYE, REJECT, control messages received (link_control.h;
//                   link_timers.cpp: handshake deadlines, silence, heartbeats)
//   sender.cpp      Sender: packing, the send queue, coalescing, credits spent (sender.h;
//                   send_now.h: the inline path; send_control.cpp: credits, loans, a failed
//                   peer's sends)
//   control.cpp     Control: control messages out, explicit credit returns (control.h)
//   receives.cpp    Receives: posted receives, first contact, stragglers (receives.h)
//   credit_bank.cpp CreditBank: grants from the receive budget, loans, reclaims (credit_bank.h)
//   delivery.cpp    Delivery: parsing, ordering, dispatch, release (delivery.h)
//   handlers.cpp    Handlers: the handler table, calls (invoke.h), unclaimed messages
//   landings.cpp    Landings: rendezvous landings, payloads waiting for memory, bounce mode
//   rpc_client.cpp  RpcClient: calls, deadlines, cancel, reply landings (rpc_client.h)
//   rpc_server.cpp  RpcServer: request windows, requests, replies (rpc_server.h)
//   api_guard.cpp   ApiGuard: the driving thread, refused calls (api_guard.h)
//   barrier.cpp     RankBarrier: Engine::barrier()'s engine side (barrier.h)
//   api.cpp         the public Engine, Peer and Message forwarding here
// Records: op.h (operations and their pool, op.cpp), peer_data.h (a peer), call.h (a call).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include <sluice/bootstrap.h>
#include <sluice/engine.h>

#include "am/api_guard.h"
#include "am/barrier.h"
#include "am/call.h"
#include "am/connections.h"
#include "am/control.h"
#include "am/counters.h"
#include "am/credit_bank.h"
#include "am/delivery.h"
#include "am/handlers.h"
#include "am/landings.h"
#include "am/link_control.h"
#include "am/live_stats.h"
#include "am/method_counters.h"
#include "am/op.h"
#include "am/peer_data.h"
#include "am/peer_table.h"
#include "am/receives.h"
#include "am/rpc_client.h"
#include "am/rpc_server.h"
#include "am/sender.h"
#include "am/submissions.h"
#include "core/fault.h"
#include "core/log.h"
#include "door/door.h"
#include "flow/flow.h"
#include "flow/spin.h"
#include "mem/pool.h"
#include "topo/topology.h"
#include "transport/transport.h"
#include "wire/wire.h"

namespace sluice::detail {

// The timers' tick: a quarter heartbeat, between 1 and 50 ms.
inline Duration timer_tick(const Config& c) {
  return std::max<Duration>(std::min<Duration>(c.heartbeat / 4, std::chrono::milliseconds(50)),
                            std::chrono::milliseconds(1));
}

class EngineCore final {
 public:
  EngineCore(const Config& config, const Topology* topo, const TransportContext* ucx, Bootstrap* boot, int engine_id);
  ~EngineCore();
  // fault_at: SLUICE_FAULT_AT as the process environment gave it.
  absl::Status init(const std::optional<NumaPolicy>& numa, std::string_view fault_at);

  // --- public API, forwarded from Engine/Peer/Message ---
  bool progress();
  bool wait(Clock::time_point deadline);  // true when it slept
  void post(absl::AnyInvocable<void()> fn);
  Result submit(Submissions::Attempt&& attempt, Clock::time_point deadline);
  // Peer's other sends and the barrier: Sender::send, inlined here (Peer::send inlines it
  // itself, sender.cpp).
  Result send(PeerData& p, HandlerId h, std::span<const std::byte> header, std::span<const std::byte> payload,
              SendCallback&& cb, PayloadCopy copy, void* memh = nullptr);
  Sender& sender() { return sender_; }
  RpcClient& rpc_client() { return rpc_client_; }
  ApiGuard& guard() { return guard_; }
  RankBarrier& barrier() { return barrier_; }
  PeerTable& peers() { return peers_; }
  Connections& connections() { return connections_; }
  Handlers& handlers() { return handlers_; }
  RpcServer& rpc_server() { return rpc_server_; }
  Result try_get_send_slot(std::size_t size, Slot* out);
  const Stats& stats();
  const MethodCounters& methods() const { return methods_; }
  // The end of the engine: Messages the application still holds are cut loose (counted, logged).
  void leave_kept_messages();
  // ~EngineCore's phases, in order: calls end Cancelled (RpcClient::close); what was sent (and submitted) goes out,
  // then BYE, then every peer is closed; the transport lets go of every receive and message.
  void close_peers(Clock::time_point deadline);
  void close_transport(Clock::time_point deadline);
  // One JSON line: time, host, pid, rank or listening port, engine, trigger, every counter,
  // the busiest peers' traffic (docs/stats.md#live-stats).
  std::string stats_line(const char* trigger);
  PoolStats pool_stats(Direction d) const;
  std::size_t eager_limit() const { return eager_limit_; }
  // How long Engine::run_until() polls after the last work before it sleeps (SLUICE_SPIN at most).
  SpinBudget& spin() { return spin_; }
  int rank() const { return boot_->rank(); }
  int size() const { return boot_->size(); }
  int id() const { return engine_id_; }

  // The transport's completion callback (OpPool's operations): queued for drain_completions().
  static void on_transport(TransportOp* op, absl::StatusCode code, std::size_t length, Tag tag);

 private:
  // ---- loop.cpp: the operation pool, completions, posted work, sleeping, timers
  void complete(Op* op, absl::StatusCode code, std::size_t length, std::uint64_t tag);
  void drain_completions();
  void run_posted();
  void timers(Clock::time_point now);
  // Every kTimerEvery-th progress call: the clock, the door, timers, first contacts,
  // stragglers. Out of line, so progress() keeps its registers for the common pass.
  [[gnu::noinline]] bool check_clock();
  // A peer is watched (LinkControl::watch): timers tick from the next tick on, where an engine
  // with nothing to watch checks them at its sleepers' deadlines, at least once a second.
  void watch_timers() { next_timer_ = std::min(next_timer_, now_ + timer_tick(config_)); }
  // Sleeps until the worker, the front door or `until` wakes it (no progress call); false when
  // the sleep ran to `until` (nothing woke it).
  bool sleep_until(Clock::time_point until);
  // The close's waits: progresses while `busy()` and before `deadline`, sleeping whenever a
  // pass finds nothing to do, woken by what arrives. A send waiting for room in a peer's
  // shared-memory FIFO wakes nobody, so the sleeps are short: 1 ms, doubling while nothing
  // happens up to 16 ms, so that hundreds of engines closing at once leave the CPU to the
  // peers they wait for.
  template <typename Busy>
  void drain_while(Busy&& busy, Clock::time_point deadline) {
    constexpr auto kLongest = std::chrono::milliseconds(16);
    for (auto nap = std::chrono::milliseconds(1); busy() && Clock::now() < deadline;) {
      if (progress()) {
        nap = std::chrono::milliseconds(1);
        continue;
      }
      wait(std::min(deadline, Clock::now() + nap));
      nap = std::min(2 * nap, kLongest);
    }
  }

  // ---- lifecycle.cpp: a peer's failure, fanned out to every component (docs/architecture.md)
  void fail_peer(PeerData& p, absl::StatusCode code, const std::string& reason);

  // ---- state used across the files above
  // First, at the engine's own address (Delivery holds no data): reaching them from the engine
  // and the engine from them costs no instruction, on the paths every message takes.
  [[no_unique_address]] Delivery delivery_{*this};
  ApiGuard guard_{*this};
  const Config config_;
  SpinBudget spin_{config_.spin};
  const Topology* topo_;
  const TransportContext* ucx_;
  Bootstrap* boot_;
  int engine_id_;
  std::uint64_t incarnation_;
  std::size_t eager_limit_;
  std::unique_ptr<Worker> worker_;
  std::unique_ptr<Pool> send_pool_;
  std::unique_ptr<Pool> recv_pool_;
  ArenaSource arena_source_;
  PeerTable peers_{*this};
  Connections connections_{*this};
  std::unique_ptr<LiveStats> live_;                // SLUICE_STATS_TRIGGER set
  Clock::time_point last_line_at_ = Clock::now();  // the last live-stats line (its rates' interval)
  OpPool ops_{this, &EngineCore::on_transport};
  Completions done_;
  bool draining_ = false;
  FaultTrigger fault_;          // SLUICE_FAULT_AT (fault tests)
  bool closing_ = false;        // shutting down: receives are not re-posted
  bool shutting_down_ = false;  // ~EngineCore runs: no handler is called any more
  bool initialized_ = false;
  // Messages point here, not at the engine: one that outlives the engine finds it gone.
  MessageAnchor* anchor_ = new MessageAnchor{this};
  LinkControl link_{*this};
  Sender sender_{*this};
  Control control_{*this};
  Receives receives_{*this};
  CreditBank bank_{*this};
  RpcClient rpc_client_{*this};
  RpcServer rpc_server_{*this};
  Landings landings_{*this};
  Handlers handlers_{*this};
  std::size_t exact_posted_ = 0;
  Clock::time_point next_timer_{};
  Clock::time_point now_ = Clock::now();          // coarse: updated when timers are checked
  Clock::time_point last_timers_ = Clock::now();  // when timers() last ran (or the engine began)
  static constexpr unsigned kTimerEvery = 64;
  unsigned since_timer_check_ = 0;
  std::mutex post_mu_;
  std::vector<absl::AnyInvocable<void()>> posted_;
  std::atomic<bool> has_posted_{false};  // post() or submit() handed work
  Submissions submissions_;
  RankBarrier barrier_{*this};
  Stats stats_;
  EngineCounters c_{};
  MethodCounters methods_;  // per-method calls, errors, latency (both sides)
  // The engine holding `part`, one of the components above. A component finds its engine at a
  // constant offset from itself (a container_of): no load, and nothing to reload after each
  // call on the message paths, which a stored EngineCore& costs (9 instructions per am_lat
  // echo, 8 per rpc_rate call, measured by scripts/instructions).
  template <typename Part>
  static EngineCore& of(const Part* part) {
    std::size_t at = 0;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"  // conditionally supported; GCC and Clang do
    if constexpr (std::is_same_v<Part, ApiGuard>) at = offsetof(EngineCore, guard_);
    else if constexpr (std::is_same_v<Part, Connections>) at = offsetof(EngineCore, connections_);
    else if constexpr (std::is_same_v<Part, Control>) at = offsetof(EngineCore, control_);
    else if constexpr (std::is_same_v<Part, CreditBank>) at = offsetof(EngineCore, bank_);
    else if constexpr (std::is_same_v<Part, Delivery>) at = offsetof(EngineCore, delivery_);
    else if constexpr (std::is_same_v<Part, Handlers>) at = offsetof(EngineCore, handlers_);
    else if constexpr (std::is_same_v<Part, Landings>) at = offsetof(EngineCore, landings_);
    else if constexpr (std::is_same_v<Part, LinkControl>) at = offsetof(EngineCore, link_);
    else if constexpr (std::is_same_v<Part, PeerTable>) at = offsetof(EngineCore, peers_);
    else if constexpr (std::is_same_v<Part, Receives>) at = offsetof(EngineCore, receives_);
    else if constexpr (std::is_same_v<Part, RankBarrier>) at = offsetof(EngineCore, barrier_);
    else if constexpr (std::is_same_v<Part, RpcClient>) at = offsetof(EngineCore, rpc_client_);
    else if constexpr (std::is_same_v<Part, RpcServer>) at = offsetof(EngineCore, rpc_server_);
    else if constexpr (std::is_same_v<Part, Sender>) at = offsetof(EngineCore, sender_);
    else static_assert(sizeof(Part) == 0, "not a component of EngineCore");
#pragma GCC diagnostic pop
    return *reinterpret_cast<EngineCore*>(const_cast<char*>(reinterpret_cast<const char*>(part)) - at);
  }
  friend class ::sluice::Message;
  friend struct EngineAccess;  // <sluice/testing.h>'s observers (api.cpp)
  friend class LinkControl;
  friend class Sender;
  friend class Receives;
  friend class RpcClient;
  friend class RpcServer;
  friend class Landings;
  friend class Handlers;
  friend class Delivery;
  friend class PeerTable;
  friend class ApiGuard;
  friend class RankBarrier;
  friend class Connections;
  friend class CreditBank;
  friend class Control;
};

// Each component reaches its engine at a constant offset from itself.
inline EngineCore& ApiGuard::engine() const { return EngineCore::of(this); }
inline EngineCore& Connections::engine() const { return EngineCore::of(this); }
inline EngineCore& CreditBank::engine() const { return EngineCore::of(this); }
inline EngineCore& Control::engine() const { return EngineCore::of(this); }
inline EngineCore& Delivery::engine() const { return EngineCore::of(this); }

inline void Delivery::attach(Message& m) {
  MessageAnchor* anchor = engine().anchor_;
  state(m).anchor = anchor;
  anchor->held.store(anchor->held.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}
inline void Delivery::detach(Message& m) {
  MessageAnchor* anchor = engine().anchor_;
  state(m).anchor = nullptr;
  anchor->held.store(anchor->held.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
}
inline void Delivery::return_credit(PeerData& p, std::uint64_t epoch) {
  // A handler may have progressed the engine, and the peer failed or restarted meanwhile. A
  // dead peer's messages are still counted down: its index is reused only when none is left.
  if (p.epoch() != epoch) [[unlikely]]
    return;
  --p.rx.unreleased_;
  if (p.state() != PeerState::kReady) [[unlikely]]
    return;
  p.rx.owed_.released();
  engine().control_.maybe_return_credits(p);
}
inline EngineCore& Handlers::engine() const { return EngineCore::of(this); }
inline EngineCore& Landings::engine() const { return EngineCore::of(this); }
inline EngineCore& LinkControl::engine() const { return EngineCore::of(this); }
inline EngineCore& PeerTable::engine() const { return EngineCore::of(this); }
inline EngineCore& Receives::engine() const { return EngineCore::of(this); }
inline EngineCore& RankBarrier::engine() const { return EngineCore::of(this); }
inline EngineCore& RpcClient::engine() const { return EngineCore::of(this); }
inline EngineCore& RpcServer::engine() const { return EngineCore::of(this); }
inline EngineCore& Sender::engine() const { return EngineCore::of(this); }
inline void Control::maybe_return_credits(PeerData& p) {
  if (p.state() == PeerState::kReady && p.rx.owed().explicit_due()) [[unlikely]]
    return_credits(p);
}

// The status code carried on the wire (absl codes fit in 16 bits).
inline absl::StatusCode code_from_wire(std::uint16_t v) {
  return v > 16 ? absl::StatusCode::kUnknown : static_cast<absl::StatusCode>(v);
}

}  // namespace sluice::detail
