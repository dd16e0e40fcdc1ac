// Connections: the front door's engine side (listen, connect, admission, the link each client
// gets, lost links).

#include <unistd.h>

#include <algorithm>

#include <absl/strings/str_format.h>

#include "am/connections.h"

#include "am/engine_core.h"
#include "core/log.h"
#include "core/net.h"
#include "transport/stream_crypto.h"
#include "transport/ucx_address.h"

namespace sluice::detail {

absl::Status Connections::load_key(const Config& config) {
  if (config.auth_mode() == AuthMode::kOff) return absl::OkStatus();
  SLUICE_ASSIGN_OR_RETURN(key_, door::Key::load(config.auth_key_file, "SLUICE_AUTH_KEY_FILE"));
  return absl::OkStatus();
}

void Connections::woke(bool readable) {
  if (door_ && (readable || Clock::now() >= door_->next_deadline())) {
    door_due_ = Clock::now() + kDoorEvery;
    (void)door_->poll(Clock::now());  // what it did is handled by the caller's next progress()
  }
}

Door& Connections::door() {
  if (!door_) {
    DoorOptions o;
    o.auth = engine().config_.auth_mode() == AuthMode::kRequired   ? door::AuthMode::kRequired
             : engine().config_.auth_mode() == AuthMode::kOptional ? door::AuthMode::kOptional
                                                                   : door::AuthMode::kOff;
    o.key = key_.get();
    o.handshake_timeout = engine().config_.handshake_timeout;
    o.max_pending = engine().config_.handshake_max;
    o.connect_timeout = engine().config_.connect_timeout;
    o.worker_address = engine().worker_->address();
    o.client_link = static_cast<std::uint8_t>((stream::aes_available() ? door::kCanAes : 0) |
                                              (engine().config_.encrypt == Encrypt::kOn ? door::kWantsEncryption : 0));
    Door::Owner* owner = this;
    door_ = std::make_unique<Door>(owner, std::move(o), &engine().stats_);
  }
  return *door_;
}

absl::StatusOr<int> Connections::listen(std::string_view host_port, bool share_port) {
  if (door_ && door_->listening()) return absl::FailedPreconditionError("this engine already listens");
  SLUICE_ASSIGN_OR_RETURN(HostPort hp, parse_host_port(host_port));
  SLUICE_ASSIGN_OR_RETURN(int port, door().listen(hp.host, hp.port, share_port));
  listen_port_ = port;
  SLUICE_LOG(kInfo, "am", "engine %d listening on %s%s (authentication %s)", engine().engine_id_,
             format_host_port(hp.host, port), share_port ? ", port shared" : "", key_ ? "on" : "off");
  return port;
}

Endpoint Connections::stream_endpoint(PeerData& p, door::Link link, const std::optional<door::Key::SessionKeys>& keys,
                                      bool client) {
  StreamOptions o;
  o.name = p.name();
  // Messages up to the eager limit go at once; larger ones (rendezvous payloads) wait at the
  // sender until their landing is posted. What may wait here unasked is what the most credits
  // and the widest RPC window it may be granted allow (it may fill a loan before we post its
  // receives), with room for its control messages.
  o.eager_max = engine().eager_limit_;
  o.frame_max = std::max(eager_slot_size(engine().eager_limit_), Receives::kContactMax);
  o.unexpected_max = (std::size_t{engine().bank_.credit_cap()} + 2 * std::size_t{engine().bank_.window_cap()} + 16) *
                     (o.frame_max + 64);
  // Its messages carry our index for it: one tagged as another peer's is refused by the stream,
  // so no client can speak for another.
  o.tag_mask = std::uint64_t{wire::kIndexMask} << wire::kIndexShift;
  o.tag_value = std::uint64_t{p.id()} << wire::kIndexShift;
  if (link == door::Link::kStreamAes || link == door::Link::kStreamChaCha) {
    o.suite = static_cast<std::uint8_t>(link == door::Link::kStreamAes ? stream::Suite::kAes256Gcm
                                                                       : stream::Suite::kChaCha20Poly1305);
    o.tx_key = client ? keys->client_to_server : keys->server_to_client;
    o.rx_key = client ? keys->server_to_client : keys->client_to_server;
  }
  return engine().worker_->stream_endpoint(std::move(o), &PeerTable::on_ep_error, &p);
}

absl::StatusOr<door::Link> Connections::choose_link(PeerData& p, const Door::Admission& a) {
  // The client's worker address is checked before UCX parses it; a malformed one is refused.
  if (absl::Status valid = check_ucx_address(a.address); !valid.ok())
    return absl::InvalidArgumentError(absl::StrFormat("its UCX worker address is malformed: %s", valid.message()));
  absl::StatusOr<Endpoint> ep = absl::UnavailableError("SLUICE_CS_TRANSPORT=stream");
  if (engine().config_.cs_transport == CsTransport::kAuto)
    ep = engine().worker_->connect(a.address, &PeerTable::on_ep_error, &p);
  if (ep.ok() && ucx_carries(p, *ep)) {
    PeerTable::set_endpoint(p, std::move(*ep));
    return door::Link::kUcx;
  }
  if (!ep.ok() && engine().config_.cs_transport == CsTransport::kAuto)
    SLUICE_LOG(kDebug, "am", "%s is served over Sluice's TCP transport (UCX does not reach it: %s)", p.name(),
               ep.status().message());
  bool encrypt = engine().config_.encrypt == Encrypt::kOn || (a.client_link & door::kWantsEncryption) != 0;
  if (encrypt && !a.keys) {
    return absl::PermissionDeniedError(
        "encryption (SLUICE_ENCRYPT=on) needs a client that proved the key: set SLUICE_AUTH_KEY_FILE");
  }
  door::Link link = !encrypt                                                          ? door::Link::kStream
                    : stream::aes_available() && (a.client_link & door::kCanAes) != 0 ? door::Link::kStreamAes
                                                                                      : door::Link::kStreamChaCha;
  PeerTable::set_endpoint(p, stream_endpoint(p, link, a.keys, /*client=*/false));
  return link;
}

bool Connections::ucx_carries(const PeerData& p, const Endpoint& ep) {
  std::string tls = ep.transports();
  if (!through_shared_fifo(tls))
    return engine().config_.ucx_tcp == UcxTcp::kYes || tls.find("tcp") == std::string::npos;
  // The client's messages would come through our FIFO: only while a probe gets through it
  // now, else this client too would wait behind what stopped it.
  Worker::Fifo fifo = engine().worker_->check_fifo(fifo_stall_after());
  // Another sender preempted between claiming an element and marking it written holds the
  // probe back for a moment: a few milliseconds more before this client goes to the stream.
  for (Clock::time_point until = Clock::now() + kFifoPatience; fifo == Worker::Fifo::kSlow && Clock::now() < until;)
    fifo = engine().worker_->check_fifo(fifo_stall_after());
  if (fifo == Worker::Fifo::kFlowing || fifo == Worker::Fifo::kNone) {
    if (fifo == Worker::Fifo::kFlowing) fifo_flows(Clock::now());
    watching_fifo_ = true;
    return true;
  }
  SLUICE_LOG(kInfo, "am", "%s is served over Sluice's TCP transport: this server's shared-memory FIFO %s", p.name(),
             fifo == Worker::Fifo::kStalled ? "has stopped" : "did not pass a probe just now");
  return false;
}

Duration Connections::fifo_stall_after() const {
  return std::max<Duration>(engine().config_.peer_timeout / 2, std::chrono::seconds(1));
}

bool Connections::over_fifo(const PeerData& p) {
  return p.rank() < 0 && p.ep().valid() && !p.ep().stream() && through_shared_fifo(p.ep().transports());
}

void Connections::watch_fifo(Clock::time_point now) {
  if (!watching_fifo_ || now < fifo_due_) return;
  fifo_due_ = now + std::max<Duration>(fifo_stall_after() / 4, std::chrono::milliseconds(100));
  Worker::Fifo fifo = engine().worker_->check_fifo(fifo_stall_after());
  if (fifo != Worker::Fifo::kHeld) {
    if (fifo == Worker::Fifo::kFlowing) fifo_flows(now);
    return;
  }
  Worker::FifoProbe probe = engine().worker_->fifo_probe();
  // The sender holding it claimed its element after the last probe that came through was sent.
  bool died = fifo_sender_died_ != Clock::time_point{} && fifo_sender_died_ >= probe.last_through_sent;
  Duration held = now - probe.waiting_since;
  Duration limit = engine().config_.peer_timeout;
  if (died) return fifo_stopped("a local client's process ended without closing its engine", fifo_stall_after());
  if (limit != kInfinite && held >= limit)
    return fifo_stopped("its sender neither finished nor ended within SLUICE_PEER_TIMEOUT", limit);
  if (fifo_held_since_ == Clock::time_point{}) {
    fifo_held_since_ = probe.waiting_since;
    SLUICE_LOG(kWarn, "am",
               "this server's shared-memory FIFO has been held for %s by a local sender that has not finished "
               "writing (a process not running: stopped, or starved of CPU); no local client has ended since, so "
               "this server waits for it, up to SLUICE_PEER_TIMEOUT=%s",
               format_duration(fifo_stall_after()), format_duration(limit));
  }
}

void Connections::fifo_flows(Clock::time_point now) {
  if (fifo_held_since_ == Clock::time_point{}) return;
  SLUICE_LOG(kWarn, "am", "this server's shared-memory FIFO flows again, after a local sender held it for %.1f s",
             std::chrono::duration<double>(now - fifo_held_since_).count());
  fifo_held_since_ = {};
}

void Connections::fifo_stopped(const char* cause, Duration after) {
  engine().worker_->fifo_stopped();
  watching_fifo_ = false;  // stopped for good (check_fifo says so to every admission)
  engine().c_.fifo_stalls->add();
  std::vector<std::uint32_t> cut;
  engine().peers_.for_each([&](PeerData& p) {
    if (p.state() != PeerState::kDead && over_fifo(p)) cut.push_back(p.id());
  });
  SLUICE_LOG(kError, "am",
             "this server's shared-memory FIFO stopped: no probe passed it in %s, and %s (a local process killed "
             "while writing into it stops it for every local sender: UCX 1.13's sysv and posix transports); the %u "
             "local clients over it fail, new ones are served over Sluice's TCP transport",
             format_duration(after), cause, cut.size());
  const std::string why = "this server's shared-memory FIFO stopped: nothing the client sends over it can arrive";
  for (std::uint32_t id : cut) engine().fail_peer(engine().peers_.at(id), absl::StatusCode::kUnavailable, why);
}

absl::StatusOr<Door::Admitted> Connections::admit(const Door::Admission& a) {
  if (engine().closing_ || engine().shutting_down_) return absl::UnavailableError("the server is shutting down");
  PeerData& p = engine().peers_.add_client();
  PeerTable::set_name(p, "client " + a.name);
  PeerTable::set_remote_index(p, a.index);
  absl::StatusOr<door::Link> link = choose_link(p, a);
  if (!link.ok()) {
    engine().peers_.abandon(p, std::string(link.status().message()));
    return link.status();
  }
  // The client speaks first: its HELLO, then ours (handle_hello).
  engine().link_.connecting(p, engine().link_.connect_deadline());
  SLUICE_LOG(kDebug, "am", "%s admitted at index %u (%s, over %s)", p.name(), p.id(),
             a.authenticated ? "authenticated" : "no key", p.ep().stream() ? p.ep().transports() : "ucx");
  return Door::Admitted{p.id(), *link};
}

void Connections::link_ready(std::uint32_t index, int fd) {
  PeerData* p = engine().peers_.by_index(index);
  if (p == nullptr || p->state() == PeerState::kDead || !p->ep().stream()) {
    ::close(fd);
    return;
  }
  p->ep().attach(fd);
}

void Connections::link_lost(std::uint32_t index, const std::string& why, bool goodbye) {
  PeerData* found = engine().peers_.by_index(index);
  if (found == nullptr) return;
  PeerData& p = *found;
  if (p.state() == PeerState::kDead) return;
  Clock::time_point now = Clock::now();
  if (!goodbye && watching_fifo_ && over_fifo(p)) fifo_sender_died_ = now;
  if (engine().link_.link_lost(p, why, now)) engine().next_timer_ = std::min(engine().next_timer_, now + kLinkGrace);
  else engine().fail_peer(p, absl::StatusCode::kUnavailable, why);
}

void Connections::endpoints_failed() {
  for (std::uint32_t id; engine().peers_.take_failed_endpoint(&id);) {
    PeerData& p = engine().peers_.at(id);
    if (p.state() == PeerState::kDead) continue;
    // A stream the peer closed after its last frame: its BYE may be among what still waits for
    // a receive, as on a door link that closes (link_lost gives it kLinkGrace).
    if (p.state() == PeerState::kReady && p.ep().closed_by_peer()) link_lost(p.id(), p.link.fail_reason(), false);
    else transfer_failed(p, p.link.fail_reason());
  }
}

void Connections::transfer_failed(PeerData& p, const std::string& why) {
  // A client killed mid-transfer fails the transfer before its link closes (its memory goes
  // before its sockets): the link has kLinkGrace to say so (link_lost, which names the cause),
  // and nothing more of the client is delivered meanwhile.
  bool lost = p.link.lost();  // closed already: its grace runs
  if (p.state() == PeerState::kReady && p.rank() < 0 && (lost || (door_ && door_->has_link(p.id())))) {
    engine().landings_.hold(p);
    if (!lost) link_lost(p.id(), why, false);
    return;
  }
  engine().fail_peer(p, absl::StatusCode::kUnavailable, why);
}

absl::Status Connections::attach_dialed(PeerData& p, const Door::Dialed& d) {
  if (d.link == door::Link::kUcx) {
    auto ep = engine().worker_->connect(d.address, &PeerTable::on_ep_error, &p);
    if (!ep.ok()) {
      door_->close_link(p.id());
      return ep.status();
    }
    PeerTable::set_endpoint(p, std::move(*ep));
    return absl::OkStatus();
  }
  bool encrypted = d.link != door::Link::kStream;
  absl::Status refused;
  if (encrypted && !d.keys) {
    refused = absl::PermissionDeniedError("the server encrypts, but it did not prove the key (SLUICE_AUTH)");
  } else if (!encrypted && engine().config_.encrypt == Encrypt::kOn) {
    refused = absl::PermissionDeniedError("the server does not encrypt, and SLUICE_ENCRYPT=on here");
  } else if (d.link == door::Link::kStreamAes && !stream::aes_available()) {
    refused = absl::UnavailableError("the server chose AES-256-GCM, which this CPU cannot run");
  }
  if (!refused.ok()) {
    ::close(d.fd);
    return refused;
  }
  PeerTable::set_endpoint(p, stream_endpoint(p, d.link, d.keys, /*client=*/true));
  p.ep().attach(d.fd);
  return absl::OkStatus();
}

absl::StatusOr<Peer*> Connections::connect(std::string_view host_port, std::optional<Duration> timeout) {
  if (door_ && door_->dialing()) return absl::FailedPreconditionError("connect() is already in progress");
  SLUICE_ASSIGN_OR_RETURN(HostPort hp, parse_host_port(host_port));
  Duration limit = timeout.value_or(engine().config_.connect_timeout);
  if (limit < Duration::zero()) return absl::InvalidArgumentError("connect(): a negative timeout");
  std::string limit_name = timeout ? absl::StrFormat("connect()'s timeout of %s", format_duration(limit))
                                   : absl::StrFormat("SLUICE_CONNECT_TIMEOUT=%s", format_duration(limit));
  auto deadline = limit == kInfinite ? Clock::time_point::max() : Clock::now() + limit;
  PeerData& p = engine().peers_.add_client();
  PeerTable::set_name(p, absl::StrFormat("server %s", host_port));
  if (absl::Status s = door().dial(hp.host, hp.port, p.id(), deadline, limit_name); !s.ok()) {
    engine().peers_.abandon(p, std::string(s.message()));
    return s;
  }
  // The pre-handshake over Sluice's own socket; the engine sleeps between its steps.
  while (door_->dialing()) {
    engine().wait(deadline);
    (void)door_->poll(Clock::now());
  }
  absl::StatusOr<Door::Dialed> dialed = door_->take_dial_result();
  if (!dialed.ok()) {
    engine().peers_.abandon(p, std::string(dialed.status().message()));
    return dialed.status();
  }
  if (p.state() == PeerState::kDead) {  // its link closed (or broke the protocol) as soon as it opened
    return absl::UnavailableError(absl::StrFormat("cannot connect to %s: %s", host_port, p.link.fail_reason()));
  }
  PeerTable::set_remote_index(p, dialed->index);
  if (absl::Status s = attach_dialed(p, *dialed); !s.ok()) {
    engine().peers_.abandon(p, std::string(s.message()));
    return absl::Status(s.code(), absl::StrFormat("cannot connect to %s: %s", host_port, s.message()));
  }
  engine().link_.connecting(p, deadline, /*dialed=*/true);
  engine().link_.send_hello(p);
  // Then the HELLOs over UCX; a failure on the way (a REJECT, the link closing, the deadline)
  // fails the peer.
  while (p.state() == PeerState::kConnecting) {
    engine().wait(deadline);
    if (Clock::now() >= deadline && p.state() == PeerState::kConnecting) {
      engine().fail_peer(
          p, absl::StatusCode::kDeadlineExceeded,
          absl::StrFormat("no handshake with %s within %s: admitted at its front door, then no HELLO from it",
                          host_port, limit_name));
    }
  }
  if (p.state() != PeerState::kReady) {
    return absl::UnavailableError(absl::StrFormat("cannot connect to %s: %s", host_port, p.link.fail_reason()));
  }
  return p.handle();
}

}  // namespace sluice::detail
