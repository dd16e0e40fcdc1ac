// sluice/engine.h — engines, peers, handlers, sends and calls.
//
// Model: an Engine owns one UCX worker, its send and receive pools, its peers, its handler
// table and its timers. Exactly one thread drives it: the first that calls progress(),
// run_until() or wait() is bound to it, and every method is called on that thread from then
// on, except post() and submit(), which any thread may call to hand it work, rank()/size()/
// id()/eager_limit()/peer(), and the destructor. A call from another thread is refused
// (kInvalidArgument, an InvalidArgument status, an empty Stats or false), counted in
// api.wrong_thread and logged once per method, naming both threads. Before the first drive, one thread at a time may
// set the engine up (register handlers, look up peers). Handing the engine to another thread is an explicit step:
// release_thread() on the driving thread, then the new thread drives it. Several engines per process are the way to use
// several cores.
//
// Peers: in rank mode, peer(rank) names the engine with the same index in process `rank`
// (engines are created collectively, in the same order, by every rank); the endpoint and the
// handshake happen on first use. Messages to one peer are delivered in send order.
//
// Completions (SendCallback, ReplyCallback) run on the engine thread from inside progress(),
// never from inside the call that started the operation, and exactly once. (One exception:
// with SLUICE_RNDV=n, a large send() whose pieces do not all fit in the send pool progresses
// the engine until they do, so other completions may run inside that send().)
//
// Flow control: a sender spends one credit per message; credits are receive slots the peer
// reserved for it. Without credits, messages wait in the peer's send queue (at most
// SLUICE_SEND_QUEUE_MAX), after which sends return kWouldBlock: progress, then retry. The
// retry is best made inside run_until, which sleeps while nothing arrives:
//   Result r;
//   engine.run_until([&] { return (r = peer->send(h, {}, bytes)) != Result::kWouldBlock; }, deadline);
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <absl/functional/any_invocable.h>
#include <sluice/api.h>
#include <sluice/config.h>
#include <sluice/message.h>
#include <sluice/pool.h>
#include <sluice/stats.h>
#include <sluice/status.h>

namespace sluice {

namespace detail {
class EngineCore;
struct EngineAccess;
struct PeerData;
class PeerTable;
}  // namespace detail

inline constexpr HandlerId kMaxHandlers = 1024;
// Largest user header of a message.
inline constexpr std::size_t kMaxUserHeader = 1024;

using Clock = std::chrono::steady_clock;
// Handlers, completions and posted work are move-only callables (absl::AnyInvocable): a lambda
// may own a Message, a Slot or a unique_ptr. HandlerOptions' sink and sink_release stay
// copyable (std::function), like the options they are part of.
using Handler = absl::AnyInvocable<void(Message&)>;
// Chooses where a rendezvous payload lands: given the announcement (header() valid, payload()
// empty, payload_size known), return a buffer of at least `size` bytes that stays valid until
// the handler runs, or an empty span for a receive-pool slot.
using PayloadSink = std::function<std::span<std::byte>(const Message& announcement, std::size_t size)>;
// RPC completion: OK with the reply, or the error (DeadlineExceeded, Cancelled, Unavailable,
// ResourceExhausted from the server's RPC window, Unimplemented, Internal...) and an empty
// Message.
using ReplyCallback = absl::AnyInvocable<void(absl::Status, Message& reply)>;
using CallId = std::uint64_t;

// Gives back a buffer the handler's sink handed out whose payload will not reach the handler:
// the sender failed or closed mid-transfer, the transfer failed, or the engine is closing.
// `announcement` is the message as the sink saw it (header, source); `buffer` what the sink
// returned (its first `size` bytes were the landing). Runs once per such buffer, on the engine
// thread; a buffer whose payload reaches the handler is never given back here.
using SinkRelease = std::function<void(const Message& announcement, std::span<std::byte> buffer)>;

struct HandlerOptions {
  // Deliver without waiting for earlier rendezvous payloads from the same peer.
  bool unordered = false;
  PayloadSink sink;
  // With `sink`: where its buffers come back when their payloads cannot be delivered (counted
  // in am.sink_returned). Without it, such a buffer is the application's to find again.
  SinkRelease sink_release = {};
};

struct ListenOptions {
  // SO_REUSEPORT: engines that listen on the same host:port with share_port, in this process
  // or in other processes of the same user, share its connections, the kernel giving each new
  // one to one of them by a hash of the client's address and port. A server on several cores
  // on one port: one engine per core, each serving its own clients (docs/rpc.md). The first
  // may ask for port 0 and give the others the port it got.
  bool share_port = false;
};

struct CallOptions {
  Duration timeout = kInfinite;
  // When not empty, the reply payload lands here directly (posted before the request leaves);
  // Message::payload() of the reply then views it. A larger reply fails with OutOfRange.
  std::span<std::byte> reply_buffer;
};

class SLUICE_API Peer {
 public:
  // The peer's rank in rank mode, -1 for a client/server peer.
  int rank() const { return rank_; }
  // This engine's index for the peer (the rank in rank mode); Message::source() of its messages.
  // Once a client/server peer is gone (failed or closed, alive() false) and nothing of it is
  // left, its index may serve a later client, as a file descriptor's number does; its Peer
  // stays valid for the engine's life and answers kUnavailable.
  std::uint32_t id() const { return id_; }
  bool alive() const;
  // Whether a message sent now leaves without waiting for a credit or behind queued messages
  // (a peer not contacted yet counts as ready: the message starts its handshake and waits only
  // for that). Engine thread; false from another (logged). The C API's SLC_SEND_FLAG_IMMEDIATE.
  bool can_send_now() const;

  // Sends an active message to `handler` on the peer. `header` (at most kMaxUserHeader bytes)
  // is copied at once. A message whose user header and payload together fit the eager limit
  // (eager_limit(), SLUICE_EAGER_MAX) is copied before send() returns (its buffer is free at
  // once) and travels in one tagged message; a larger payload goes by rendezvous straight
  // from `payload`, which must stay valid and unchanged until on_done runs (like MPI_Isend).
  // Returns (status.h):
  //   kOk               on_done will run once, with OK or why the message was lost
  //   kWouldBlock       the peer's send queue (SLUICE_SEND_QUEUE_MAX) or the send pool is
  //                     full: progress, then retry
  //   kInvalidArgument  a header above kMaxUserHeader, a payload above SLUICE_MAX_MESSAGE, or
  //                     a thread that does not drive the engine (the reason is logged)
  //   kUnavailable      the peer is dead or closed
  // on_done runs only when kOk was returned. It is taken (moved from) only then: after
  // kWouldBlock the caller still has it, to pass again on the retry.
  Result send(HandlerId handler, std::span<const std::byte> header, std::span<const std::byte> payload,
              SendCallback&& on_done = {});
  // send() without a user header. (The completion is a template parameter so that
  // send(handler, header, {}) still means an empty payload.)
  Result send(HandlerId handler, std::span<const std::byte> payload) { return send(handler, {}, payload); }
  template <typename F>
  requires std::is_invocable_v<F&, absl::Status> Result send(HandlerId handler, std::span<const std::byte> payload,
                                                             F&& on_done) {
    return send(handler, {}, payload, SendCallback(std::forward<F>(on_done)));
  }
  // send() of the first `length` bytes of a registered send-pool slot (Engine::try_get_send_slot):
  // a large payload goes by rendezvous with the slot's memory handle, so UCX looks up no
  // registration. The slot must stay alive (and unchanged) until on_done runs. Returns as
  // send(); kInvalidArgument also for an empty slot or a length beyond it.
  Result send(HandlerId handler, std::span<const std::byte> header, const Slot& payload, std::size_t length,
              SendCallback&& on_done = {});
  // send(), but the payload is copied first: the caller's buffer is free when this returns.
  // Returns as send().
  Result send_copy(HandlerId handler, std::span<const std::byte> header, std::span<const std::byte> payload,
                   SendCallback&& on_done = {});
  // send_copy() without a user header.
  Result send_copy(HandlerId handler, std::span<const std::byte> payload) { return send_copy(handler, {}, payload); }
  template <typename F>
  requires std::is_invocable_v<F&, absl::Status> Result send_copy(HandlerId handler, std::span<const std::byte> payload,
                                                                  F&& on_done) {
    return send_copy(handler, {}, payload, SendCallback(std::forward<F>(on_done)));
  }
  // Calls `method` on the peer; `on_reply` runs once (ReplyCallback: the statuses it gets).
  // Requests beyond the RPC window the server granted wait in this peer's queue. `id` (optional)
  // receives the call's id for Engine::cancel(); ids are never 0, not reused within 2^28 calls
  // of this engine, and not consecutive. A call without a timeout outstanding longer than SLUICE_CALL_WARN is logged
  // once (it goes on waiting). Returns as send(), and:
  //   kWouldBlock       also when 2^20 calls of this engine are outstanding
  //   kInvalidArgument  also without an on_reply, or (bounce mode, SLUICE_RNDV=n) a request
  //                     above the eager limit with a reply_buffer
  // on_reply runs only when kOk was returned, and is taken only then (as send()'s on_done).
  // The request's header is copied at once; its payload, like send()'s, is copied when it fits
  // the eager limit and otherwise must stay valid and unchanged until on_reply runs
  // (call_copy() copies it first).
  Result call(HandlerId method, std::span<const std::byte> header, std::span<const std::byte> payload,
              CallOptions options, ReplyCallback&& on_reply, CallId* id = nullptr);
  // call() without a user header.
  Result call(HandlerId method, std::span<const std::byte> payload, CallOptions options, ReplyCallback&& on_reply,
              CallId* id = nullptr) {
    return call(method, {}, payload, options, std::move(on_reply), id);
  }
  // call(), but the request's payload is copied first: the caller's buffer is free when this
  // returns. Returns as call().
  Result call_copy(HandlerId method, std::span<const std::byte> header, std::span<const std::byte> payload,
                   CallOptions options, ReplyCallback&& on_reply, CallId* id = nullptr);
  Result call_copy(HandlerId method, std::span<const std::byte> payload, CallOptions options, ReplyCallback&& on_reply,
                   CallId* id = nullptr) {
    return call_copy(method, {}, payload, options, std::move(on_reply), id);
  }

 private:
  friend class detail::EngineCore;
  friend class detail::PeerTable;  // makes and retires Peers
  Peer(detail::EngineCore* e, detail::PeerData* data, std::uint32_t id, int rank)
      : engine_(e), data_(data), id_(id), rank_(rank) {}
  detail::EngineCore* engine_;
  detail::PeerData* data_;  // the engine's state for this peer; a gone client's: a dead stand-in
  std::uint32_t id_;
  int rank_;
};

struct EngineOptions {
  // Where this engine's pools live, instead of SLUICE_NUMA (the configuration's numa).
  std::optional<NumaPolicy> numa;
  // This engine's own configuration instead of the context's (validated; e.g. rndv = false for
  // a bounce-buffer baseline engine beside a normal one).
  std::optional<Config> config;
};

class SLUICE_API Engine {
 public:
  // Orderly close, bounded by min(SLUICE_CONNECT_TIMEOUT, 5 s): messages already sent or queued
  // go out first (rendezvous payloads included, queued ones as the peers return credits), then
  // every connected peer is told BYE with the last sequence sent, so it closes only once all of
  // those are in, and answers BYE. The close waits 500 ms for those answers, and for a server
  // this engine connected to, up to the deadline, not failing it for silence meanwhile (the
  // server answers once it has read what was sent before the BYE). While it runs, completion
  // callbacks of sends and calls still run (they may be told Cancelled); handlers do not:
  // messages that arrive are dropped and counted, requests are answered Unavailable. Calls
  // waiting for replies (or for the server's RPC window) complete with Cancelled at once; the
  // close sleeps, not spins, while sends drain. What the deadline cuts off completes with
  // Cancelled. Buffers passed to send() must outlive the Engine when their sends have not
  // completed. Messages the application still holds become invalid (counted in
  // api.messages_outlived_engine, logged): safe to destroy later, on any thread; so are send
  // Slots it still holds (empty: data() null, size() 0; logged). The destructor may run on any
  // thread once no other thread uses the engine, nor releases its Messages or Slots meanwhile.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  int rank() const;
  int size() const;
  int id() const;

  // Installs `fn` for `id`. Messages that arrived for `id` before (an engine keeps them, each
  // holding one of its sender's credits; am.unclaimed) reach `fn` first, in order, from the
  // next progress(). A call to a method not registered is answered Unimplemented, not kept.
  // AlreadyExists when one is installed; InvalidArgument for an id not below kMaxHandlers, an
  // empty `fn`, or a thread that does not drive the engine.
  absl::Status register_handler(HandlerId id, Handler fn, HandlerOptions options = {});
  // NotFound when none is installed; InvalidArgument from a thread that does not drive it.
  absl::Status unregister_handler(HandlerId id);

  // Rank mode: the peer engine in process `rank`; nullptr only when there is no such rank
  // (logged). Any thread may look a peer up; its operations then follow the threading rule.
  Peer* peer(int rank);

  // Client/server mode, through Sluice's own TCP front door (docs/security.md). listen()
  // accepts connections on host:port ("0.0.0.0:0", "127.0.0.1:13337", an IPv6 address in
  // brackets: "[::1]:0"; port 0 picks one; SO_REUSEADDR, so a restarted server listens again
  // at once) and returns the port. Each
  // connection runs a bounded pre-handshake, proves SLUICE_AUTH_KEY_FILE's key both ways when
  // SLUICE_AUTH asks for it, and only then gets a peer and a UCX endpoint; connected clients
  // appear as peers whose messages carry their id() as source(). The engine serves the socket
  // from progress() and wait(). InvalidArgument for a bad address, FailedPrecondition when
  // already listening, Unavailable when the address cannot be bound.
  absl::StatusOr<int> listen(std::string_view host_port);
  // listen() with options: share_port to share one port among engines (ListenOptions).
  absl::StatusOr<int> listen(std::string_view host_port, ListenOptions options);
  // Connects to a listening engine and completes both handshakes, sleeping on the socket and
  // progressing this engine meanwhile (at most SLUICE_CONNECT_TIMEOUT). Unavailable at once
  // when nothing listens there (naming the address), or when the server closes or cannot
  // admit us (a close before the server's first frame, which a door under a flood does, is
  // dialed again at once, at most 8 times); PermissionDenied when the keys do not match or one side requires a key the
  // other lacks (naming SLUICE_AUTH_KEY_FILE); DeadlineExceeded when the server does not
  // answer in time; InvalidArgument for a bad address (an IPv6 one without its brackets,
  // "::1:13337", is one). One connect() at a time per engine.
  // Once connected, the peer fails (operations complete with Unavailable) within about
  // 250 ms of the server's process ending.
  absl::StatusOr<Peer*> connect(std::string_view host_port);
  // connect() within `timeout` (kInfinite: no limit) instead of SLUICE_CONNECT_TIMEOUT.
  absl::StatusOr<Peer*> connect(std::string_view host_port, Duration timeout);

  // Progresses communication once and runs due completions and handlers. Returns whether
  // anything happened.
  bool progress();
  // Progresses until `done()` is true (returns true) or `deadline` passes (returns false).
  // Busy-polls while there is work and for at most SLUICE_SPIN (100us) after the last of it
  // (less while its sleeps outlast the spin), then
  // sleeps as wait() does: a done() that another thread makes true should be followed by
  // post() on this engine, which wakes it (otherwise it is seen at the next timer tick,
  // within 50 ms with connected peers, 1 s without).
  bool run_until(const std::function<bool()>& done, Clock::time_point deadline = Clock::time_point::max());
  // Sleeps until there is something to do or `deadline` (efd + ucp_worker_arm: an idle engine
  // uses no CPU), then progresses.
  void wait(Clock::time_point deadline);
  // Runs `fn` on the engine thread from inside progress(). Any thread; wakes a waiting engine.
  void post(absl::AnyInvocable<void()> fn);
  // Any thread: the way to send or call from threads that do not drive the engine. `attempt`
  // (a send, a call, anything answering a Result) runs on the engine thread from progress();
  // while it answers kWouldBlock it is run again after the engine has done something (a
  // completion, a returned credit), never in a loop, and later attempts wait behind it, in
  // order. Its other answers are its own to act on (the engine drops them). At most 4096
  // attempts wait; beyond that the caller blocks until one is answered or `deadline`.
  // Returns kOk (queued), kWouldBlock (still full at `deadline`; on the engine thread at
  // once, as it cannot wait for itself) or kUnavailable (the engine is closing). The close
  // runs what waits, within its deadline; what is left is destroyed unrun (logged).
  //   std::vector<std::byte> data = ...;  // owned by the attempt: any thread may go on
  //   engine.submit([peer, data = std::move(data)] { return peer->send_copy(kPut, data); });
  Result submit(absl::AnyInvocable<Result()> attempt, Clock::time_point deadline = Clock::time_point::max());
  // Hands the engine over: the driving thread lets go of it, and the next thread that calls
  // progress(), run_until() or wait() drives it from then on. Until then any one thread may
  // call its methods (as before the first drive). Call it on the driving thread, once that
  // thread is done with the engine; kInvalidArgument-style refusal (logged) on another.
  void release_thread();

  // Rank mode: waits, progressing this engine (as run_until does), until every rank's engine
  // with this id has entered its barrier of the same number. When it returns OK, every message
  // any rank sent this engine before entering has been delivered to its handler (those of
  // handlers with HandlerOptions::unordered may still be landing): the "all ranks are done
  // sending" idiom is sends, then barrier(). DeadlineExceeded (how many ranks arrived),
  // Unavailable when a rank failed; OK at once in a one-rank job. Bootstrap::fence() does not
  // progress the engine: peers waiting in it look silent to each other.
  absl::Status barrier(Clock::time_point deadline = Clock::time_point::max());
  // Cancels a call: it completes once with Cancelled (unless it completed already).
  void cancel(CallId id);

  // A registered send-pool slot of at least `size` bytes, for messages built in place. kOk;
  // kWouldBlock when its class is full (slots free as sends complete and the application
  // releases its own: progress, then retry); kInvalidArgument for a size above the largest
  // class (SLUICE_POOL_CLASSES) or a thread that does not drive the engine.
  Result try_get_send_slot(std::size_t size, Slot* out);

  // Counters (updated on read with the pool and queue gauges). On a thread that does not
  // drive the engine: logged, and an empty Stats.
  const Stats& stats();
  // Each RPC method's calls, errors and latency percentiles, as client and as server
  // (MethodStats). On a thread that does not drive the engine: logged, and empty.
  std::vector<MethodStats> method_stats() const;
  PoolStats pool_stats(Direction d) const;
  std::size_t eager_limit() const;

 private:
  friend class Context;
  friend struct detail::EngineAccess;  // <sluice/testing.h>'s observers
  Engine(std::shared_ptr<const void> context, std::unique_ptr<detail::EngineCore> core);
  std::shared_ptr<const void> context_;  // the context's state, kept alive while the engine is
  std::unique_ptr<detail::EngineCore> core_;
};

}  // namespace sluice
