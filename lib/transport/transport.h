// The transport (internal): the handful of tagged-messaging operations the protocol uses.
//
// Move-only owners for the transport context, worker, endpoint and memory registration;
// tagged send and receive with one completion path for both immediate and callback completion.
// Two implementations of these declarations exist, chosen at link time so that the per-message
// path pays no virtual call: ucx.cpp (UCX; the library) and fake.cpp (an in-process fabric that
// drops, holds, duplicates and fails on command; only protocol tests link it, see fake.h).
//
// Completion model: an operation is described by a TransportOp the caller owns and keeps
// alive until it completes. post_* returns kDone when the transport completed the operation in
// place (the op's callback is NOT called), kPending when the callback will run later (from
// inside Worker::progress()), or an error status (nothing is pending). Callbacks run on the
// worker's thread, inside progress(); they should record the completion and return.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <sluice/config.h>
#include <sluice/status.h>

#include "core/process_env.h"

namespace sluice::detail {

using Tag = std::uint64_t;
inline constexpr Tag kFullMask = ~Tag{0};

// The text of a transport error status, as an endpoint's ErrorCallback receives it.
const char* transport_error_name(int status);

struct TransportOp;
using TransportCallback = void (*)(TransportOp* op, absl::StatusCode code, std::size_t length, Tag sender_tag);

struct TransportOp {
  TransportCallback on_complete = nullptr;
  void* request = nullptr;      // the UCX request while pending, for cancel
  void* stream = nullptr;       // a receive pending on a stream connection (stream.h), for cancel
  void* own_request = nullptr;  // UCX request memory its worker lent it for exact receives, for its life
};

enum class Post { kDone, kPending, kError };

struct PostResult {
  Post kind;
  absl::StatusCode code = absl::StatusCode::kOk;  // with kError
  std::size_t length = 0;                         // with kDone receives
  Tag sender_tag = 0;                             // with kDone receives
};

// Whether an endpoint's lanes (Endpoint::transports(): "sysv/memory cma/memory") carry its
// messages through the receiver's shared-memory FIFO (Worker::check_fifo).
inline bool through_shared_fifo(std::string_view transports) {
  return transports.find("sysv/") != std::string_view::npos || transports.find("posix/") != std::string_view::npos;
}

class Worker;
class FifoWatch;
class StreamConn;
class StreamHub;

// A stream endpoint (stream.h): Sluice's own transport over a TCP connection.
struct StreamOptions {
  std::string name;                                   // in logs: "client 10.0.0.7:40312"
  std::size_t eager_max = 8192;                       // sends up to this go at once; larger ones wait for the receiver
  std::size_t frame_max = std::size_t{64} * 1024;     // the largest eager frame accepted from the peer
  std::size_t unexpected_max = std::size_t{1} << 20;  // bytes held for no posted receive; beyond: the peer fails
  Tag tag_mask = 0, tag_value = 0;                    // every tag the peer sends has these bits; else it fails
  std::uint8_t suite = 0;                             // stream::Suite: 0 plain, else encrypted both ways
  std::array<std::byte, 32> tx_key{}, rx_key{};       // with a suite: our direction's key and the peer's
};

class TransportContext {
 public:
  // Creates a UCP context for tag matching with peer error handling, with the shared-memory
  // transports' error handling switched on where the transport list allows them (aliases such
  // as shm read as UCX reads them: core/tls.h), so local peers keep sysv/posix/cma, their FIFO
  // sized from the credits (shm_fifo_size, unless the user sized it), and UCX_TLS from
  // config.tls (or UCX_TLS as given, env.ucx_tls). Checks once per process that CMA works
  // between processes and, when it does not, says so and leaves cma out (unless UCX_TLS is set).
  // Without a list of the user's, of the shared-memory transports only posix is used where
  // /dev/shm has 256 MiB free, sysv otherwise.
  // Without `ucx_tcp`, UCX's TCP transport is left out whatever SLUICE_TLS or UCX_TLS say
  // (client/server mode, a job on one host: see auto_ucx_tcp in core/tls.h).
  static absl::StatusOr<std::unique_ptr<TransportContext>> create(const Config& config, const ProcessEnv& env = {},
                                                                  bool ucx_tcp = true);
  ~TransportContext();
  TransportContext(const TransportContext&) = delete;
  TransportContext& operator=(const TransportContext&) = delete;

  void* handle() const { return context_; }
  // Whether UCX may use TCP in this process.
  bool ucx_tcp() const { return ucx_tcp_; }
  // What UCX reports about its transports and devices, then the UCX settings Sluice made.
  std::string describe() const;
  // The shared-memory FIFO size Sluice set (UCX_MM_FIFO_SIZE), or empty: UCX's own or the user's.
  const std::string& fifo_size() const { return fifo_size_; }
  // The most credits a peer sending through that FIFO may hold (shm_fifo_credits), or 0 when
  // Sluice did not size it (UCX_MM_FIFO_SIZE or UCX_{SYSV,POSIX}_FIFO_SIZE set: the user's).
  std::uint32_t fifo_credits() const;
  // The shared-memory transports (sysv, posix) this context may use, as a UCX_TLS list; empty
  // when none: a FIFO probe of another context opens no more than these.
  const std::string& shm_tls() const { return shm_tls_; }

 private:
  TransportContext() = default;
  void* context_ = nullptr;
  bool ucx_tcp_ = true;
  std::string fifo_size_;
  std::string shm_tls_;
  std::vector<std::string> settings_;  // "UCX_NAME=value", as applied
};

// A registered memory region: ucp_mem_map(address, length), unmapped on destruction.
class MemoryRegistration {
 public:
  static absl::StatusOr<MemoryRegistration> map(const TransportContext& ctx, void* addr, std::size_t len);
  MemoryRegistration() = default;
  MemoryRegistration(MemoryRegistration&& other) noexcept;
  MemoryRegistration& operator=(MemoryRegistration&& other) noexcept;
  ~MemoryRegistration();  // NOLINT(performance-trivially-destructible): ucx.cpp's unmaps; fake.cpp's is empty
  void* handle() const { return memh_; }  // ucp_mem_h

 private:
  void reset();
  void* context_ = nullptr;
  void* memh_ = nullptr;
};

// An endpoint towards one remote worker. Destroying it force-closes it.
class Endpoint {
 public:
  using ErrorCallback = void (*)(void* arg, int ucs_status);
  Endpoint() = default;
  Endpoint(Endpoint&& other) noexcept;
  Endpoint& operator=(Endpoint&& other) noexcept;
  ~Endpoint();

  bool valid() const { return ep_ != nullptr || stream_ != nullptr; }
  void* handle() const { return ep_; }
  // A stream endpoint (Worker::stream_endpoint) rather than a UCX one.
  bool stream() const { return stream_ != nullptr; }
  // Stream endpoints: gives the connected socket (until then sends wait); why it failed.
  void attach(int fd);
  std::string failure() const;
  // The peer closed the stream between frames: its last messages may still wait for receives.
  bool closed_by_peer() const;

  PostResult post_send(TransportOp* op, const void* buf, std::size_t len, Tag tag, void* memh) const;
  // Sends at once or not at all (UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL): kOk when UCX took the
  // bytes (the buffer is free again, no callback follows); otherwise the error, with
  // kResourceExhausted when it could not right now (too large for UCX's inline send, or the
  // transport's queue is full) and nothing was sent. (A code, not a PostResult: it comes back
  // in a register.)
  absl::StatusCode send_now(const void* buf, std::size_t len, Tag tag) const;
  // Starts closing: with `force`, cancels what is outstanding (peer is dead); otherwise flushes.
  // Returns a request to wait for with Worker::wait_request, or nullptr when done.
  void* start_close(bool force);
  // Starts a flush (ucp_ep_flush_nbx): it completes once UCX's wire-up of the endpoint is
  // done and what its lanes hold is sent. A request for Worker::wait_request, or nullptr when
  // done (and for a stream endpoint).
  void* start_flush();
  // The transports and devices of the endpoint's lanes ("sysv/memory tcp/veth0"), from
  // ucp_ep_print_info: for the debug log.
  std::string transports() const;

 private:
  friend class Worker;
  friend class FifoWatch;
  void close_stream();
  void* ep_ = nullptr;
  void* worker_ = nullptr;
  StreamConn* stream_ = nullptr;
  StreamHub* hub_ = nullptr;
};

class Worker {
 public:
  static absl::StatusOr<std::unique_ptr<Worker>> create(const TransportContext& ctx);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  void* handle() const { return worker_; }
  // The packed address other processes connect to.
  const std::string& address() const { return address_; }

  // Endpoint towards a worker address (checked first: check_ucx_address), in peer error mode; `on_error(arg, status)`
  // runs inside progress() when UCX declares the endpoint failed.
  absl::StatusOr<Endpoint> connect(std::string_view address, Endpoint::ErrorCallback on_error, void* arg);
  // A stream endpoint (stream.h) whose socket comes later (Endpoint::attach); `on_error(arg,
  // status)` runs inside progress() when the connection fails (Endpoint::failure() says why).
  Endpoint stream_endpoint(StreamOptions options, Endpoint::ErrorCallback on_error, void* arg);
  // The stream connections' epoll fd, to sleep on beside event_fd(); -1 when there are none.
  int stream_fd() const;
  // The engine slept on stream_fd() and woke, for it (`ready`: the next progress() reads the
  // connections) or for another fd (the sleep looked at them: the next passes need not).
  void streams_woke(bool ready);
  // Small sends to stream endpoints between hold_sends() and release_sends() are copied and
  // written once per connection at release (a pass of handlers answering many requests pays
  // one system call per peer). Nothing for UCX endpoints.
  void hold_sends() {
    if (streams_) [[unlikely]]
      hold_streams();
  }
  void release_sends() {
    if (streams_) [[unlikely]]
      release_streams();
  }

  // Receives always complete through the callback (UCP_OP_ATTR_FLAG_NO_IMM_CMPL). Completing
  // in place would be cheaper, but UCX 1.13.1 was seen to leave recv_info.tag_info unfilled
  // (length 0) for in-place completions, on TCP for small messages and on shared memory for
  // an 8169-byte exact-tag receive: the message's length and sender would be unknown.
  // A receive that matches a message already waiting in UCX completes inside this call (its
  // callback runs before it returns, and the op holds no request afterwards).
  // `from`: the peer's endpoint. A stream endpoint's receives match only what arrives on its
  // connection; for any other (a UCX one, or none yet) UCX matches whatever arrives.
  PostResult post_recv(const Endpoint& from, TransportOp* op, void* buf, std::size_t len, Tag tag, Tag mask,
                       void* memh);
  // post_recv() on an exact tag (the full mask), its result as a code: kOk when posted (a
  // receive never completes in place), else the error. The re-post of every consumed receive
  // takes it: one argument fewer, and the result comes back in a register. Its UCX request is
  // memory the worker lends the op once (op->own_request), not one from UCX's pool taken and
  // freed per message.
  absl::StatusCode post_recv_exact(const Endpoint& from, TransportOp* op, void* buf, std::size_t len, Tag tag,
                                   void* memh);
  // A message that arrived with no posted receive to take it, removed from UCX's unexpected
  // queue by take_unexpected (ucp_tag_probe_nb), to be received with post_recv_message.
  struct Unexpected {
    void* message = nullptr;  // ucp_tag_message_h, or a StreamMsg when `stream`; nullptr: none waiting
    std::size_t length = 0;
    Tag tag = 0;
    bool stream = false;
  };
  Unexpected take_unexpected(Tag tag, Tag mask);
  // Receives a taken message into buf (at least its length); completes like post_recv.
  PostResult post_recv_message(TransportOp* op, const Unexpected& msg, void* buf, std::size_t len, void* memh);
  // Cancels a pending operation; its callback then runs with kCancelled.
  void cancel(TransportOp* op);
  // Whether UCX holds an arrived message that matches (tag, mask) but no posted receive took
  // (ucp_tag_probe_nb without removing it): for diagnostics.
  bool has_unexpected(Tag tag, Tag mask);

  // The health of this worker's shared-memory receive FIFO. UCX's sysv and posix transports
  // carry every local peer's messages through one FIFO per worker, read in order; UCX 1.13
  // marks an element written only after filling it, so a sender stopped in between holds the
  // FIFO for every local sender: until it runs again, or for good when it was killed there.
  // The check sends a probe through it from a second worker (of a context of its own with the
  // shared-memory transports only, made at the first check: no TCP port, as little memory as
  // UCX allows), progresses both, and says whether the probe came through: kFlowing; kSlow
  // while it has not, for less than `stall_after` since it was sent; kHeld after that, until
  // it comes through or fifo_stopped() says the sender died: kStalled from then on. kNone: no
  // such FIFO here.
  enum class Fifo { kNone, kFlowing, kSlow, kHeld, kStalled };
  Fifo check_fifo(std::chrono::steady_clock::duration stall_after);
  // The caller's verdict on a held FIFO: stopped for good.
  void fifo_stopped();
  // While the FIFO is held: when the waiting probe was sent, and when the last probe that came
  // through was (the sender holding the FIFO claimed its element after that one).
  struct FifoProbe {
    std::chrono::steady_clock::time_point waiting_since, last_through_sent;
  };
  FifoProbe fifo_probe() const;

  // Progresses communication; returns whether anything happened.
  bool progress();
  // Event-driven waiting: the fd to poll, and arm() which returns false when events are
  // already pending (progress again instead of sleeping).
  int event_fd() const { return efd_; }
  bool arm();
  // Reads the wake-up datagrams local senders left on the worker's shared-memory sockets
  // (ucx_wake.cpp: unread, they fill the senders' socket buffers, and UCX then drops their
  // wake-ups to every other process). After a sleep, and now and then while the worker runs
  // without sleeping. armed(): armed since the last drain (a sender's wake-up may come).
  void drain_wakeups();
  bool armed() const { return armed_; }
  // Wakes a thread sleeping on the event fd (any thread).
  void signal();
  // Progresses until `request` (from Endpoint::start_close) completes or `deadline`.
  absl::Status wait_request(void* request, std::chrono::steady_clock::time_point deadline);
  // Closes a failed peer's endpoint: flushes it first, progressing for at most `flush_bound`,
  // then starts the force close (Endpoint::start_close(true)), whose request it returns.
  // UCX 1.13.1 destroys a force-closed endpoint at once. Had it sent a wire-up request (its
  // first rendezvous send does) that crossed the peer's, the peer's endpoint may have taken
  // its id; the peer's request, handled after the destruction, is answered by a new internal
  // endpoint with another id, and the peer aborts (ucp_ep.inl:215, remote_id ==
  // remote_ep_id). The flush completes only once the wire-up is done: the peer's request
  // then reached this endpoint. A peer silent past the bound is closed on regardless; a zero
  // bound (a peer known dead) skips the flush.
  void* close_failed(Endpoint& ep, std::chrono::steady_clock::duration flush_bound);

 private:
  friend class FifoWatch;
  Worker();
  static absl::StatusOr<Endpoint> make_endpoint(void* worker, void* params, Endpoint::ErrorCallback on_error, void* arg,
                                                const char* what);
  bool stream_progress();
  void hold_streams();
  void release_streams();
  bool progress_with_streams();
  void* lend_request();
  // post_recv_exact() on a stream, or an op's first post (its request memory lent first).
  [[gnu::noinline]] absl::StatusCode post_recv_exact_first(const Endpoint& from, TransportOp* op, void* buf,
                                                           std::size_t len, Tag tag, void* memh);
  void find_wake_sockets();
  void* worker_ = nullptr;
  const TransportContext* ctx_ = nullptr;  // the context the worker belongs to (check_fifo)
  int efd_ = -1;
  std::vector<int> wake_sockets_;  // drain_wakeups': UCX's, in the event set, as last read
  std::chrono::steady_clock::time_point next_wake_scan_{};
  bool armed_ = false;
  std::string address_;
  FifoWatch* fifo_ = nullptr;           // owned: check_fifo's probe, once made
  bool no_fifo_ = false;                // check_fifo found no shared-memory FIFO to watch
  std::unique_ptr<StreamHub> streams_;  // made by the first stream_endpoint()
  // Request memory lent to ops for exact receives (lend_request), in chunks freed after the
  // worker: UCX's request size, rounded up to a cache line, per op.
  std::size_t request_size_ = 0, chunk_used_ = 0;
  std::vector<std::unique_ptr<std::byte[]>> request_chunks_;
};

}  // namespace sluice::detail
