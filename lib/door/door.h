// The front door (internal): Sluice's own TCP listener and dialer for client/server mode.
//
// Nothing a client sends reaches UCX before it has passed here. A connection runs the
// pre-handshake of wire/door.h over a non-blocking socket: fixed-size, validated frames; the
// key proven both ways when authentication is on (door/auth.h); then the two sides exchange
// their UCX worker addresses and the indices they use in tags, and the server says how the data
// will travel (ACCEPT's link): over UCX by worker address when the server reached the client
// over shared memory (a same-host peer), else on this very connection, which becomes the
// peer's stream transport (owner's link_ready on the server, Dialed::fd on the client). A
// connection left to UCX stays open as the link: when it closes (the peer's process is gone),
// the engine is told at once, and whether the peer said goodbye on it first (door::kLinkGoodbye:
// its engine closed in order).
//
// Bounds, all checked before anything is allocated or read: a frame's length against its
// kind's (at most kMaxFrame bytes buffered per connection), a deadline per connection in
// handshake (SLUICE_HANDSHAKE_TIMEOUT; the first frame within kFirstFrameTime of the accept: a
// client that sends nothing or trickles bytes is closed), and at most SLUICE_HANDSHAKE_MAX
// connections in handshake at once: a new one closes the oldest that has not sent its whole
// CLIENT_HELLO, or, when all have, waits in the kernel's backlog; one source address holds at
// most a quarter of the places before a hello. A flood of silent or trickling connections
// cannot keep out a client that sends its hello at once, and no client past its hello is
// closed to make room.
//
// The client side, one dial at a time, is a Dialer (door/dialer.h) on the same epoll set.
//
// Threading: one thread, the engine's. Every socket is in one epoll set, whose fd the engine
// sleeps on beside UCX's; poll() does what is due and never blocks.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>

#include <sluice/config.h>
#include <sluice/stats.h>
#include <sluice/status.h>

#include "core/log.h"

#include "door/auth.h"
#include "wire/door.h"

namespace sluice::detail {

using Clock = std::chrono::steady_clock;

struct DoorConn;  // a connection in handshake (door/conn.h)
class Dialer;     // the client side (door/dialer.h)

// A server connection's whole CLIENT_HELLO is due this long after its accept (or within
// SLUICE_HANDSHAKE_TIMEOUT, when shorter): a client sends it as soon as it is connected.
inline constexpr Duration kFirstFrameTime = std::chrono::seconds(1);
// A connection without its hello is safe this long from the per-source bound: a real client
// whose hello is on its way is not closed for a flood from its own address.
inline constexpr Duration kHelloGrace = std::chrono::milliseconds(100);

struct DoorOptions {
  door::AuthMode auth = door::AuthMode::kOff;
  const door::Key* key = nullptr;  // with auth optional or required
  Duration handshake_timeout = std::chrono::seconds(3);
  std::size_t max_pending = 64;
  Duration connect_timeout = std::chrono::seconds(10);  // for messages only: the caller's deadline
  std::string worker_address;                           // ours, given to the other side
  std::uint8_t client_link = 0;                         // a client's CLIENT_PROOF link bits (wire/door.h)
};

class Door {
 public:
  // A client that passed the pre-handshake, to be admitted by the engine.
  struct Admission {
    std::string name;     // its address, "10.0.0.7:40312"
    std::uint32_t index;  // its index for us: the index we put in tags to it
    std::string address;  // its UCX worker address
    bool authenticated;
    std::uint8_t client_link;                    // what it can do (kCanAes, kWantsEncryption)
    std::optional<door::Key::SessionKeys> keys;  // authenticated both ways: the stream's keys
  };
  // What admit() decided: our index for it, how its data travels.
  struct Admitted {
    std::uint32_t index;
    door::Link link;
  };
  // What a dial ends with: the server's index for us and its worker address.
  struct Dialed {
    std::uint32_t index = 0;
    std::string address;
    bool authenticated = false;
    door::Link link = door::Link::kUcx;
    int fd = -1;  // a stream link: the connection, now the caller's
    std::optional<door::Key::SessionKeys> keys;
  };
  class Owner {
   public:
    // Makes the client's peer and endpoint; returns our index for it (the index it puts in its
    // tags to us), or why it cannot be served (sent to the client as a REFUSE).
    virtual absl::StatusOr<Admitted> admit(const Admission& a) = 0;
    // The link of `index` closed or failed: the peer's process ended, or it broke the protocol;
    // `goodbye`: it said goodbye first (door::kLinkGoodbye), closing its engine in order.
    virtual void link_lost(std::uint32_t index, const std::string& why, bool goodbye) = 0;
    // ACCEPT is out and the peer's data travels on this connection: `fd` is the owner's now.
    virtual void link_ready(std::uint32_t index, int fd) = 0;

   protected:
    ~Owner() = default;
  };

  Door(Owner* owner, DoorOptions options, Stats* stats);
  ~Door();
  Door(const Door&) = delete;
  Door& operator=(const Door&) = delete;

  // Listens on host:port (port 0 picks one; SO_REUSEADDR, so a restarted server can listen
  // again at once); returns the port. Unavailable when the address cannot be bound.
  // `share_port`: SO_REUSEPORT, the port's connections shared with others that set it too.
  absl::StatusOr<int> listen(const std::string& host, int port, bool share_port = false);
  bool listening() const { return listen_fd_ >= 0; }

  // Starts the client side towards host:port: `our_index` is the index the server is to put in
  // its tags to us. One dial at a time; it ends in poll(), by `deadline` at the latest.
  // `limit` names the deadline in a timeout's message ("SLUICE_CONNECT_TIMEOUT=10s").
  absl::Status dial(const std::string& host, int port, std::uint32_t our_index, Clock::time_point deadline,
                    std::string limit);
  bool dialing() const;
  // The finished dial's result: the server's index and address (its link then belongs to
  // `our_index`), or why it failed (Unavailable, PermissionDenied, DeadlineExceeded, ...).
  absl::StatusOr<Dialed> take_dial_result();

  // Closes the link of `index` (its peer failed or closed); no link_lost() follows.
  // `goodbye`: the engine closes in order, and says so first (door::kLinkGoodbye).
  void close_link(std::uint32_t index, bool goodbye = false);
  // Whether `index` has a link (its client's data travels over UCX).
  bool has_link(std::uint32_t index) const { return links_.contains(index); }

  // The epoll fd to sleep on; readable when poll() has something to do.
  int fd() const { return epoll_fd_; }
  // When poll() must run at the latest (a connection's deadline), or max() when never.
  Clock::time_point next_deadline() const { return next_deadline_; }
  // Accepts, reads, writes and expires connections; calls the owner back. Returns whether
  // anything happened.
  bool poll(Clock::time_point now);

 private:
  using Conn = DoorConn;
  void accept_all(Clock::time_point now);
  // Closes the oldest connection without a whole CLIENT_HELLO accepted `min_age` ago or more (of
  // `source` only), when `keep` or more are without one (serve.cpp).
  enum class Room { kEnough, kMade, kNone };
  Room close_before_hello(Clock::time_point now, const std::string* source, std::size_t keep, Duration min_age);
  void evict(Conn& c, const char* why);
  // Server connections in handshake (the dial's is not one of them).
  std::size_t pending() const { return conns_.size(); }
  // Watches the listener again once a place is free after listen_full_.
  void listen_if_room();
  void on_conn_event(std::uint64_t id, std::uint32_t events, Clock::time_point now);
  void on_link_event(std::uint32_t index, int fd);
  // Whether we have a key to prove and check (authentication optional or required).
  bool auth_on() const { return options_.auth != door::AuthMode::kOff && options_.key != nullptr; }
  // Server side (serve.cpp): a client's frame, by the step it is in.
  void serve_hello(Conn& c);
  void serve_proof(Conn& c);
  // The client's proof checked: whether it is authenticated, or nullopt when it was refused.
  std::optional<bool> check_proof(Conn& c, const door::Credentials& cred);
  void send_accept(Conn& c, const Admitted& admitted);
  void refuse(Conn& c, absl::StatusCode code, const std::string& reason);
  void refuse_malformed(Conn& c, const std::string& what);
  // Server: a client's REFUSE instead of its proof (it gave up on our SERVER_HELLO).
  void client_refused(Conn& c);
  void drop(std::uint64_t id);
  void to_link(Conn& c, std::uint32_t index);
  void add_link(std::uint32_t index, int fd);
  void update_deadline();

  Owner* owner_;
  DoorOptions options_;
  int epoll_fd_ = -1;
  int listen_fd_ = -1;
  bool listen_paused_ = false;  // out of fds: accepting again at listen_resume_
  bool listen_full_ = false;    // SLUICE_HANDSHAKE_MAX of clients past their hello: accepting again below it
  Clock::time_point listen_resume_{};
  std::unordered_map<std::uint64_t, std::unique_ptr<Conn>> conns_;  // in handshake, by id
  std::deque<std::uint64_t> accept_order_;                          // server side, oldest first
  struct Link {
    int fd;
    bool goodbye;  // the peer said goodbye on it
  };
  std::unordered_map<std::uint32_t, Link> links_;  // by index
  std::uint64_t next_id_ = 1;
  std::unique_ptr<Dialer> dialer_;  // the client side: one dial at a time
  Clock::time_point next_deadline_ = Clock::time_point::max();
  struct Counters {
    Counter* accepted;
    Counter* refused_auth;
    Counter* bad_frames;
    Counter* timed_out;
    Counter* evicted;
    Counter* closed_early;
    Counter* links_lost;
  } c_{};
  // Clients that refused us: one line a second per door (a flood of them is one line).
  RateLimit refused_log_;
};

}  // namespace sluice::detail
