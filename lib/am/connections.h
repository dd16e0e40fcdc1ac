// Client/server connections (internal): the engine's side of the front door (lib/door), which
// owns the listening socket and the pre-handshake. listen() and connect() make the door on
// first use; an admitted client gets a peer record and the link the server chooses for it
// (UCX when reachable over shared memory, else the stream, encrypted when either side asks);
// a link that closes gives its peer a short grace to say why before it fails.
#pragma once

#include <cassert>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <sluice/engine.h>

#include "door/door.h"
#include "transport/transport.h"

namespace sluice::detail {

class EngineCore;
struct PeerData;

class Connections final : private Door::Owner {
 public:
  // How long a peer whose link closed may still say BYE.
  static constexpr Duration kLinkGrace = std::chrono::milliseconds(250);

  explicit Connections([[maybe_unused]] EngineCore& e) { assert(&engine() == &e); }
  Connections(const Connections&) = delete;
  Connections& operator=(const Connections&) = delete;

  // Init: SLUICE_AUTH_KEY_FILE's key, when authentication is on.
  absl::Status load_key(const Config& config);
  absl::StatusOr<int> listen(std::string_view host_port, bool share_port);
  // `timeout`: this connect's limit instead of SLUICE_CONNECT_TIMEOUT.
  absl::StatusOr<Peer*> connect(std::string_view host_port, std::optional<Duration> timeout);
  int listen_port() const { return listen_port_; }

  // A send or landing to the peer failed (`why`): fails it, or, for a client whose link is
  // open, gives the link kLinkGrace to say whether its process ended (then that is the cause).
  void transfer_failed(PeerData& p, const std::string& why);
  // Peers whose endpoint UCX declared failed (PeerTable): each fails, or, for a stream its peer
  // closed, gets the grace of a closed link.
  void endpoints_failed();
  // The peer's link closed (Door::Owner; also a stream endpoint its peer closed); `goodbye`:
  // after the peer said it closes its engine in order.
  void link_lost(std::uint32_t index, const std::string& why, bool goodbye) override;
  // A failed client's link is closed; `goodbye` when it is closed in order (Door::close_link).
  void close_link(std::uint32_t index, bool goodbye) {
    if (door_) door_->close_link(index, goodbye);
  }

  // The engine's loop: the door polled every kDoorEvery while busy (true when it did
  // something); its socket and next deadline for sleeping, then polled when it woke.
  bool poll_due(Clock::time_point now) {
    if (!door_ || now < door_due_) return false;
    door_due_ = now + kDoorEvery;
    return door_->poll(now);
  }
  int fd() const { return door_ ? door_->fd() : -1; }
  // From the timers, once a client came over UCX's shared memory: a probe through the
  // worker's FIFO (Worker::check_fifo). A FIFO held for fifo_stall_after() after a local
  // client's process ended without a goodbye has stopped for good; one held as long as
  // SLUICE_PEER_TIMEOUT by a sender that lives on is failed too. Either fails the clients it
  // carried, and later clients get the stream.
  void watch_fifo(Clock::time_point now);
  Clock::time_point next_deadline() const { return door_ ? door_->next_deadline() : Clock::time_point::max(); }
  void woke(bool readable);
  // Whether the client's (or server's) messages come through this worker's shared-memory FIFO.
  static bool over_fifo(const PeerData& p);

 private:
  // How often a busy engine looks at its front door (a poll of one epoll fd).
  static constexpr Duration kDoorEvery = std::chrono::microseconds(50);
  // How long an admission waits for a probe through the shared-memory FIFO (ucx_carries).
  static constexpr Duration kFifoPatience = std::chrono::milliseconds(5);

  Door& door();
  // Door::Owner: a client passed the pre-handshake; its stream's socket.
  absl::StatusOr<Door::Admitted> admit(const Door::Admission& a) override;
  void link_ready(std::uint32_t index, int fd) override;
  // A client/server peer's stream endpoint (docs/architecture.md, "Transports"): `link` says
  // whether and how it is encrypted; `keys` are the door's session keys for it.
  Endpoint stream_endpoint(PeerData& p, door::Link link, const std::optional<door::Key::SessionKeys>& keys,
                           bool client);
  // The server's choice for an admitted client: UCX when its worker address is reachable over
  // shared memory (or SLUICE_UCX_TCP=y lets UCX's TCP carry it), else the stream, encrypted
  // when either side asks.
  absl::StatusOr<door::Link> choose_link(PeerData& p, const Door::Admission& a);
  // Whether UCX's endpoint to an admitted client may carry it: over TCP only with
  // SLUICE_UCX_TCP=y; over shared memory only while a probe passes the worker's FIFO now.
  bool ucx_carries(const PeerData& p, const Endpoint& ep);
  // Half of SLUICE_PEER_TIMEOUT, at least a second: a FIFO silent this long has stopped (the
  // local clients would be declared dead for silence soon after, for the wrong reason).
  Duration fifo_stall_after() const;
  // A probe came through: a FIFO found held flows again (logged).
  void fifo_flows(Clock::time_point now);
  // A held FIFO (watch_fifo) that has stopped, held `after` or more: its clients fail.
  void fifo_stopped(const char* cause, Duration after);
  // The client's side: the endpoint the server's ACCEPT asked for.
  absl::Status attach_dialed(PeerData& p, const Door::Dialed& d);
  EngineCore& engine() const;  // the engine holding this (EngineCore::of)

  std::unique_ptr<door::Key> key_;  // SLUICE_AUTH_KEY_FILE's, when authenticating
  std::unique_ptr<Door> door_;
  int listen_port_ = -1;
  Clock::time_point door_due_{};         // poll_due() polls the door from then on
  bool watching_fifo_ = false;           // a client came over UCX's shared memory, and the FIFO has not stopped
  Clock::time_point fifo_due_{};         // watch_fifo's next probe
  Clock::time_point fifo_held_since_{};  // watch_fifo found it held (logged once until it flows)
  // When a local client's process last ended without closing its engine (its link closed
  // without a goodbye): a sender killed mid-write stops the FIFO for good.
  Clock::time_point fifo_sender_died_{};
};

}  // namespace sluice::detail
