// The engine (internal): one object, its state and its protocol, owned by one thread. The
// declarations below are grouped by the file that implements them:
//   lifecycle.cpp   construction, init, the orderly close, handlers, stats
//   loop.cpp        progress, sleeping, posted work, timers, completions
//   peer_table.cpp  rank and client/server peers, endpoints, failure, the front door
//   link_control.cpp LinkControl: HELLO, BYE, REJECT, control messages received (link_control.h;
//                   link_timers.cpp: handshake deadlines, silence, heartbeats)
//   sender.cpp      Sender: packing, the send queue, coalescing, credits spent (sender.h;
//                   send_now.h: the inline path; send_control.cpp: control messages)
//   receives.cpp    Receives: posted receives, first contact, stragglers (receives.h)
//   receive.cpp     parsing, ordering, dispatch (invoke.h), release
//   landings.cpp    Landings: rendezvous landings, payloads waiting for memory, bounce mode
//   rpc_client.cpp  RpcClient: calls, deadlines, cancel, reply landings (rpc_client.h)
//   rpc_server.cpp  RpcServer: server slots, requests, replies (rpc_server.h)
//   api.cpp         the public Engine, Peer and Message forwarding here
// Records: op.h (operations and their pool, op.cpp), peer_data.h (a peer), call.h (a call).
#pragma once

#include <array>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <sluice/bootstrap.h>
#include <sluice/engine.h>

#include "am/barrier.h"
#include "am/call.h"
#include "am/counters.h"
#include "am/landings.h"
#include "am/link_control.h"
#include "am/live_stats.h"
#include "am/op.h"
#include "am/peer_data.h"
#include "am/receives.h"
#include "am/rpc_client.h"
#include "am/rpc_server.h"
#include "am/sender.h"
#include "am/submissions.h"
#include "am/unclaimed.h"
#include "core/fault.h"
#include "core/log.h"
#include "door/door.h"
#include "flow/flow.h"
#include "mem/pool.h"
#include "topo/topology.h"
#include "transport/transport.h"
#include "wire/wire.h"

namespace sluice::detail {

struct HandlerEntry {
  Handler fn;
  HandlerOptions options;
};

class EngineCore final : private Door::Owner {
 public:
  EngineCore(const Config& config, const Topology* topo, const TransportContext* ucx, Bootstrap* boot, int engine_id);
  ~EngineCore();
  // fault_at: SLUICE_FAULT_AT as the process environment gave it.
  absl::Status init(const std::optional<NumaPolicy>& numa, std::string_view fault_at);

  // --- public API, forwarded from Engine/Peer/Message ---
  // Whether the calling thread may call `what` (a public method's name): the thread driving
  // the engine, or any thread before one does. Otherwise counted (api.wrong_thread), logged
  // once per engine naming both threads, and false: the caller returns kInvalidArgument.
  bool engine_thread(const char* what) {
    if (on_driver_thread()) [[likely]]
      return true;
    wrong_thread(what);
    return false;
  }
  void wrong_thread(const char* what);
  // kInvalidArgument, logged: a send or reply from an empty Slot or beyond its size; an OK
  // status given to reply_error().
  Result bad_slot(const char* what, const Slot& slot, std::size_t length) {
    return invalid(
        absl::StrFormat("%s: %s", what,
                        !slot ? std::string("the Slot is empty")
                              : absl::StrFormat("length %u is beyond the slot's %u bytes", length, slot_size(slot))));
  }
  Result bad_status() { return invalid("Message::reply_error: the status is OK (use reply() for an answer)"); }
  // kInvalidArgument, counted (api.invalid_argument) and logged with `why`, rate-limited per
  // call site.
  Result invalid(const std::string& why, const char* file = __builtin_FILE(), unsigned line = __builtin_LINE());
  // Binds the calling thread when nothing drives the engine; false (after wrong_thread()) when
  // another thread does.
  bool bind_driver(const char* what);
  // The driving thread lets go: the next thread to drive the engine binds it.
  void release_thread();
  absl::Status register_handler(HandlerId id, Handler fn, HandlerOptions options);
  absl::Status unregister_handler(HandlerId id);
  // Any thread: the Peer of `rank`, or nullptr (logged) for a rank outside the job.
  Peer* peer(int rank) const {
    if (static_cast<std::size_t>(rank) < rank_handles_.size()) [[likely]]  // a negative rank wraps: too large
      return rank_handles_[static_cast<std::size_t>(rank)];
    return no_such_rank(rank);
  }
  Peer* no_such_rank(int rank) const;
  bool progress();
  void wait(Clock::time_point deadline);
  void post(absl::AnyInvocable<void()> fn);
  Result submit(Submissions::Attempt&& attempt, Clock::time_point deadline);
  // Engine::barrier(): enter (its number); then, on each pass, send what waits and say whether
  // every other rank's word is in (*done), or why it cannot be (a rank failed).
  std::uint64_t barrier_enter();
  absl::Status barrier_status(std::uint64_t epoch, bool* done);
  absl::Status barrier_timed_out(std::uint64_t epoch);
  // Peer::send and the barrier: Sender::send, inlined here so that the public call reaches
  // it as cheaply as a call into the engine itself.
  Result send(PeerData& p, HandlerId h, std::span<const std::byte> header, std::span<const std::byte> payload,
              SendCallback&& cb, PayloadCopy copy, void* memh = nullptr);
  RpcClient& rpc_client() { return rpc_client_; }
  RpcServer& rpc_server() { return rpc_server_; }
  void release(Message& m);
  // A Message comes to hold something of this engine / lets go of it (MessageAnchor::held).
  void attach(Message& m) {
    m.s_.anchor = anchor_;
    anchor_->held.store(anchor_->held.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  void detach(Message& m) {
    m.s_.anchor = nullptr;
    anchor_->held.store(anchor_->held.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  }
  // A sink's buffer whose payload will not reach its handler goes back (HandlerOptions).
  void give_back_sink(Message& m);
  // Releases a plain message its handler neither kept nor released, on the engine thread
  // right after the handler: it owns nothing but the borrow; its credit is returned.
  void release_handled(PeerData& p, Message& m);
  // A released Message's credit goes back to its peer (unless the peer failed or restarted
  // since it arrived).
  void return_credit(PeerData& p, std::uint64_t epoch);
  // The receive part's writers for the other components (ReceiveState is this engine's):
  // a Message's credit is owed back now (credit_freed) or never (credit_gone, its peer
  // failing); the credits owed, taken to ride on a message; what we grant at our HELLO; a
  // restarted peer starting over; held messages dropped (no HELLO came for them).
  static void credit_freed(PeerData& p) {
    --p.rx.unreleased_;
    p.rx.owed_.released();
  }
  static void credit_gone(PeerData& p) { --p.rx.unreleased_; }
  static std::uint16_t take_owed(ReceiveState& rx) { return rx.owed_.take(); }
  static void grant_receiving(PeerData& p, std::uint32_t credits) {
    p.rx.granted_ = credits;
    p.rx.owed_.grant(credits);
  }
  static void restart_receiving(PeerData& p) {
    p.rx.owed_ = CreditReturn();
    p.rx.unreleased_ = 0;
    p.rx.window_ = ReorderWindow<Incoming>();
  }
  static void drop_held(PeerData& p) { p.rx.window_.clear(); }
  Peer* peer_handle(std::uint32_t peer);
  Result try_get_send_slot(std::size_t size, Slot* out);
  const Stats& stats();
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
  std::size_t outstanding_sends() const { return sender_.inflight(); }
  std::size_t posted_exact_receives() const { return exact_posted_; }
  std::size_t eager_limit() const { return eager_limit_; }
  Duration spin() const { return config_.spin; }
  int rank() const { return boot_->rank(); }
  absl::StatusOr<int> listen(std::string_view host_port);
  // `timeout`: this connect's limit instead of SLUICE_CONNECT_TIMEOUT.
  absl::StatusOr<Peer*> connect(std::string_view host_port, std::optional<Duration> timeout);
  int size() const { return boot_->size(); }
  int id() const { return engine_id_; }

  // Transport callback trampolines.
  static void on_transport(TransportOp* op, absl::StatusCode code, std::size_t length, Tag tag);
  static void on_ep_error(void* arg, int ucs_status);

 private:
  // ---- types used below
  // Runs m's handler: kNoHandler when none is registered; kThrew (counted, logged, the
  // exception's message in handler_error_) when it threw. Handlers never throw past this point.
  // Inline (am/invoke.h): every handler call passes here.
  enum class Invoke { kDone, kNoHandler, kThrew };

  // ---- lifecycle.cpp
  // Logs the TCP ports the worker opened (those listening now and not in `before`).
  void log_ucx_ports(const std::vector<std::string>& before);

  // ---- loop.cpp: the operation pool, completions, posted work, sleeping, timers
  Op* new_op(OpKind kind, std::uint32_t peer) { return ops_.take(kind, peer); }
  void free_op(Op* op) { ops_.give(op); }
  void complete(Op* op, absl::StatusCode code, std::size_t length, std::uint64_t tag);
  void drain_completions();
  void run_posted();
  void timers(Clock::time_point now);
  // Every kTimerEvery-th progress call: the clock, the door, timers, first contacts,
  // stragglers. Out of line, so progress() keeps its registers for the common pass.
  [[gnu::noinline]] bool check_clock();
  // A peer began connecting or became ready: timers tick from now on, where an engine with
  // nothing to watch checked them once a second.
  void watch_timers() { next_timer_ = std::min(next_timer_, now_); }
  // Logs a peer all of whose credits the application's unreleased messages hold, once per
  // stretch that lasts SLUICE_HEARTBEAT.
  void watch_held_credits(PeerData& p, Clock::time_point now);
  // Sleeps until the worker, the front door or `until` wakes it (no progress call).
  void sleep_until(Clock::time_point until);
  // The close's waits: progresses while `busy()` and before `deadline`, sleeping (at most a
  // millisecond at a time) instead of spinning whenever a pass finds nothing to do.
  template <typename Busy>
  void drain_while(Busy&& busy, Clock::time_point deadline) {
    while (busy() && Clock::now() < deadline)
      if (!progress()) wait(std::min(deadline, Clock::now() + std::chrono::milliseconds(1)));
  }

  // ---- peer_table.cpp: rank and client/server peers, endpoints, failure, the front door
  void fail_peer(PeerData& p, absl::StatusCode code, const std::string& reason);
  absl::Status ensure_endpoint(PeerData& p);
  PeerData* create_rank_peer(int rank);
  PeerData* peer_by_slot_slow(std::uint32_t slot);
  PeerData& new_cs_peer();
  PeerData& init_cs_peer(PeerData& p);
  bool reusable(const PeerData& p) const;
  // A client/server peer that never got going (its connect or admission failed): gone.
  void abandon_cs_peer(PeerData& p, const std::string& why);
  // The front door, made on first listen() or connect().
  Door& door();
  // Door::Owner: a client passed the pre-handshake; its link closed; its stream's socket.
  absl::StatusOr<Door::Admitted> admit(const Door::Admission& a) override;
  void link_lost(std::uint32_t slot, const std::string& why) override;
  // A send or landing to the peer failed (`why`): fails it, or, for a client whose link is
  // open, gives the link kLinkGrace to say whether its process ended (then that is the cause).
  void transfer_failed(PeerData& p, const std::string& why);
  void link_ready(std::uint32_t slot, int fd) override;
  // A client/server peer's stream endpoint (docs/architecture.md, "Transports"): `link` says
  // whether and how it is encrypted; `keys` are the door's session keys for it.
  Endpoint stream_endpoint(PeerData& p, door::Link link, const std::optional<door::Key::SessionKeys>& keys,
                           bool client);
  // The server's choice for an admitted client: UCX when its worker address is reachable over
  // shared memory (or SLUICE_UCX_TCP=y lets UCX's TCP carry it), else the stream, encrypted
  // when either side asks.
  absl::StatusOr<door::Link> choose_link(PeerData& p, const Door::Admission& a);
  // The client's side: the endpoint the server's ACCEPT asked for.
  absl::Status attach_dialed(PeerData& p, const Door::Dialed& d);
  void count_drop(const char* what);

  // ---- receive.cpp: parsing, ordering, dispatch, release
  void on_rx(Op* op, absl::StatusCode code, std::size_t length, std::uint64_t tag);
  // One received tagged message, lying in `lender` (or nullptr: bytes no Message may take
  // over): checks it and takes its message(s). `ctrl_only`: it came with a CTRL-class tag,
  // which carries nothing but control messages.
  void parse_and_accept(std::span<std::byte> bytes, Slot* lender, std::uint64_t tag, bool ctrl_only = false);
  // A CTRL-class message taken from UCX's unexpected queue (Receives).
  void accept_contact(std::span<std::byte> bytes, std::uint64_t tag);
  void deliver(PeerData& p);
  // Takes one received message: `bytes` (wire header first). The Message borrows them from
  // the caller, which keeps them until the Message is released or moved. `lender` is the
  // slot they lie in when they are its only message (a Message moved takes it over), or
  // nullptr (one of a coalesced tagged message's messages: a move copies them). Inline, in
  // receive.cpp: every received message passes here.
  void accept(PeerData* p, Slot* lender, std::span<std::byte> bytes, const wire::Header& h);
  // A message from a peer not ready: true when it is taken (its HELLO came meanwhile, or it
  // waits for it: *early), false when dropped (counted).
  bool admit_unready(PeerData& p, bool* early);
  // A message not next in order (or while an ordered rendezvous lands): the reorder window
  // keeps it, or it is dropped as a duplicate; then what is deliverable is delivered.
  void hold_or_drop(PeerData& p, Message&& m, const wire::Header& h, std::uint64_t seq);
  // A borrowed Message being moved (kept beyond its handler): takes over its lender's slot,
  // or copies its user header and payload into a receive slot of its own (the heap when
  // none is free).
  void own_bytes(Message& m);
  void accept_coalesced(PeerData* p, std::span<const std::byte> bytes);
  void process(PeerData& p, Message& m, const wire::Header& h);
  void handler_threw(const Message& m, const char* what);
  // The last handler exception's message (Invoke::kThrew), taken.
  std::string take_handler_error() { return std::move(handler_error_); }
  // A plain message whose handler is not registered: kept (am/unclaimed.h), counted, logged.
  void no_handler(Message& m);
  // ---- handlers.cpp: the handler table, messages waiting for their handler
  // A registration waiting for claim() (messages wait for it), or nullptr.
  HandlerEntry* claiming(HandlerId id);
  // Installs a waiting registration and delivers what waited for it, oldest first.
  void claim(HandlerId id);
  // The close: messages whose handler never came are dropped, counted and logged.
  void drop_unclaimed();
  // A rank's barrier word (barrier.cpp).
  void barrier_word(const Message& m);
  void finish_incoming(PeerData& p, Message& m);

  // ---- invoke.h: handler calls
  Invoke invoke_handler(Message& m);
  // Runs m's handler; for one not registered the message is kept (no_handler).
  void dispatch(Message& m);

  // ---- peer lookups, inline: every message passes here
  // The peer of `rank` (created on first use); nullptr for a rank outside the job.
  PeerData* peer_by_rank(int rank) {
    if (rank < 0 || rank >= ranks_) return nullptr;
    if (PeerData* known = peers_[static_cast<std::size_t>(rank)].get()) [[likely]]
      return known;
    return create_rank_peer(rank);
  }
  // The peer of a slot known to hold one (a Message's, an operation's).
  PeerData& peer_at(std::uint32_t slot) { return *peers_[slot]; }
  // The peer that sent a message with tag slot `slot`; nullptr when there is none.
  PeerData* peer_by_slot(std::uint32_t slot) {
    if (slot < peers_.size() && peers_[slot]) [[likely]]
      return peers_[slot].get();
    return peer_by_slot_slow(slot);
  }

  // ---- state used across the files above
  std::string handler_error_;

  const Config config_;
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
  std::vector<std::unique_ptr<PeerData>> peers_;  // ranks first, then client/server peers
  int ranks_ = 0;                                 // boot_->size(), read on every lookup
  std::unique_ptr<door::Key> key_;                // SLUICE_AUTH_KEY_FILE's, when authenticating
  std::unique_ptr<Door> door_;
  int listen_port_ = -1;
  std::unique_ptr<LiveStats> live_;                // SLUICE_STATS_TRIGGER set
  Clock::time_point last_line_at_ = Clock::now();  // the last live-stats line (its rates' interval)
  Clock::time_point door_due_{};                   // progress() polls the door from then on
  // How often a busy engine looks at its front door (a poll of one epoll fd), and how long a
  // peer whose link closed may still say BYE.
  static constexpr Duration kDoorEvery = std::chrono::microseconds(50);
  static constexpr Duration kLinkGrace = std::chrono::milliseconds(250);
  std::vector<std::string> addresses_;  // by rank
  std::vector<Peer*> rank_handles_;     // by rank; fixed once init() returns
  std::vector<HandlerEntry> handlers_;
  Unclaimed unclaimed_;                                       // plain messages whose handler is not registered yet
  std::vector<std::pair<HandlerId, HandlerEntry>> claiming_;  // registered, installed by claim()
  OpPool ops_{this, &EngineCore::on_transport};
  std::vector<Completion> done_;
  std::vector<std::uint32_t> failed_eps_;  // peers whose endpoint UCX declared failed
  // Client/server peers that are gone: their slots serve later clients once nothing of them is
  // left (reusable()). A gone client's Peer handle is kept, pointing at gone_peer_, so that
  // one the application still holds answers kUnavailable instead of reaching the new client.
  std::deque<std::uint32_t> gone_cs_;
  static PeerData dead_stand_in() {
    PeerData p;
    p.state = PeerState::kDead;
    return p;
  }
  PeerData gone_peer_ = dead_stand_in();
  std::vector<std::unique_ptr<Peer>> gone_handles_;
  bool draining_ = false;
  FaultTrigger fault_;          // SLUICE_FAULT_AT (fault tests)
  bool closing_ = false;        // shutting down: receives are not re-posted
  bool shutting_down_ = false;  // ~EngineCore runs: no handler is called any more
  bool initialized_ = false;
  // The thread driving the engine, by its thread pointer (comparing that is one instruction
  // where std::this_thread::get_id() is a call into libc): nullptr until the first progress(),
  // run_until() or wait() binds the calling thread, and again after release_thread().
  std::atomic<const void*> driver_tp_{nullptr};
  std::atomic<int> driver_tid_{0};  // its kernel thread id, for messages
  std::atomic<std::uint64_t> wrong_thread_calls_{0};
  std::mutex wrong_thread_mu_;
  std::vector<std::string> wrong_thread_logged_;  // the methods refused so far (each logged once)
  static const void* thread_pointer() {
#if defined(__has_builtin) && __has_builtin(__builtin_thread_pointer)
    return __builtin_thread_pointer();
#else
    static thread_local const char marker = 0;  // distinct per thread, like the thread pointer
    return &marker;
#endif
  }
  // The calling thread drives the engine, or nothing does yet.
  bool on_driver_thread() const {
    const void* d = driver_tp_.load(std::memory_order_relaxed);
    return d == thread_pointer() || d == nullptr;
  }
  // Messages point here, not at the engine: one that outlives the engine finds it gone.
  MessageAnchor* anchor_ = new MessageAnchor{this};
  LinkControl link_{*this};
  Sender sender_{*this};
  Receives receives_{*this};
  RpcClient rpc_client_{*this};
  RpcServer rpc_server_{*this};
  Landings landings_{*this};
  // invalid()'s rate limits, by call site (file, line).
  std::map<std::pair<const char*, unsigned>, RateLimit> invalid_limits_;
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
  Barrier barrier_;
  Stats stats_;
  EngineCounters c_{};
  // The engine's traffic counters and the peer's share of them (live stats), counted together.
  void count_sent(PeerData& p, std::uint64_t msgs, std::uint64_t bytes) {
    c_.msgs_sent->add(msgs);
    c_.bytes_sent->add(bytes);
    p.traffic.msgs_sent += msgs;
    p.traffic.bytes_sent += bytes;
  }
  void count_received(PeerData& p, std::uint64_t msgs, std::uint64_t bytes) {
    c_.msgs_received->add(msgs);
    c_.bytes_received->add(bytes);
    p.traffic.msgs_received += msgs;
    p.traffic.bytes_received += bytes;
  }
  void count_credit_stall(PeerData& p) {
    c_.credit_stalls->add();
    ++p.traffic.credit_stalls;
  }
  // Every live peer, in slot order.
  template <typename Fn>
  void for_each_peer(Fn&& fn) {
    for (auto& p : peers_)
      if (p) fn(*p);
  }
  friend class ::sluice::Message;
  friend class LinkControl;
  friend class Sender;
  friend class Receives;
  friend class RpcClient;
  friend class RpcServer;
  friend class Landings;
};

// The status code carried on the wire (absl codes fit in 16 bits).
inline absl::StatusCode code_from_wire(std::uint16_t v) {
  return v > 16 ? absl::StatusCode::kUnknown : static_cast<absl::StatusCode>(v);
}

}  // namespace sluice::detail
