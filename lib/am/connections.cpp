// Connections: a peer's failure with all it had in flight, and the front door's glue (listen,
// connect, admission, the link each client gets, lost links).

#include <unistd.h>

#include <algorithm>

#include <absl/strings/str_format.h>

#include "am/engine_core.h"
#include "core/log.h"
#include "core/net.h"
#include "transport/stream_crypto.h"
#include "transport/ucx_address.h"

namespace sluice::detail {

void EngineCore::fail_peer(PeerData& p, absl::StatusCode code, const std::string& reason) {
  if (p.state == PeerState::kDead) return;
  // A stream that failed knows why (a send failing right after it would only say "failed").
  if (std::string why = p.ep.failure(); code != absl::StatusCode::kCancelled && !why.empty() && why != reason) {
    fail_peer(p, absl::StatusCode::kUnavailable, why);
    return;
  }
  bool orderly = code == absl::StatusCode::kCancelled;
  if (!orderly) {
    c_.peers_failed->add();
    // The cause's code is named when it says more than the UNAVAILABLE the operations get.
    SLUICE_LOG(kWarn, "am", "peer %s failed%s: %s; its operations complete with UNAVAILABLE", p.name,
               code == absl::StatusCode::kUnavailable ? "" : absl::StrFormat(" (%s)", absl::StatusCodeToString(code)),
               reason);
  } else {
    SLUICE_LOG(kDebug, "am", "peer %s closed: %s", p.name, reason);
  }
  p.state = PeerState::kDead;
  LinkControl::failed(p.link, reason);
  if (p.rank < 0 && door_) door_->close_link(p.id);
  absl::Status status(orderly ? absl::StatusCode::kCancelled : absl::StatusCode::kUnavailable,
                      absl::StrFormat("peer %s: %s", p.name, reason));
  // Queued messages never reached the transport: complete them here, once.
  sender_.drop_queued(p, status);
  rpc_client_.drop_waiting(p, status);
  // In-flight sends complete through the force close (their callbacks see an error)...
  if (p.ep.valid()) {
    void* req = p.ep.start_close(true);
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
    if ((op.kind == OpKind::kRndvRx || op.kind == OpKind::kReplyRx) && op.peer == p.id && op.request != nullptr) {
      worker_->cancel(&op);
    }
  }
  // Calls to this peer complete now (those with a posted reply receive once it is cancelled).
  rpc_client_.end_calls(p, status);
  std::uint32_t posted = receives_.close(p);
  if (std::uint32_t granted = Delivery::take_grant(p); granted != 0) recv_pool_->eager().unreserve(granted + posted);
  sender_.release_held(p);
  rpc_server_.grant(p, config_.rpc_slots);
  peers_.gone(p);
}

void EngineCore::count_drop(const char* what) {
  c_.dropped_dead->add();
  SLUICE_LOG_RATE_LIMITED(kInfo, "am", "dropped a message: %s", what);
}

Door& EngineCore::door() {
  if (!door_) {
    DoorOptions o;
    o.auth = config_.auth_mode() == AuthMode::kRequired   ? door::AuthMode::kRequired
             : config_.auth_mode() == AuthMode::kOptional ? door::AuthMode::kOptional
                                                          : door::AuthMode::kOff;
    o.key = key_.get();
    o.handshake_timeout = config_.handshake_timeout;
    o.max_pending = config_.handshake_max;
    o.connect_timeout = config_.connect_timeout;
    o.worker_address = worker_->address();
    o.client_link = static_cast<std::uint8_t>((stream::aes_available() ? door::kCanAes : 0) |
                                              (config_.encrypt == Encrypt::kOn ? door::kWantsEncryption : 0));
    Door::Owner* owner = this;
    door_ = std::make_unique<Door>(owner, std::move(o), &stats_);
  }
  return *door_;
}

absl::StatusOr<int> EngineCore::listen(std::string_view host_port) {
  if (door_ && door_->listening()) return absl::FailedPreconditionError("this engine already listens");
  SLUICE_ASSIGN_OR_RETURN(HostPort hp, parse_host_port(host_port));
  SLUICE_ASSIGN_OR_RETURN(int port, door().listen(hp.host, hp.port));
  listen_port_ = port;
  SLUICE_LOG(kInfo, "am", "engine %d listening on %s (authentication %s)", engine_id_, format_host_port(hp.host, port),
             key_ ? "on" : "off");
  return port;
}

Endpoint EngineCore::stream_endpoint(PeerData& p, door::Link link, const std::optional<door::Key::SessionKeys>& keys,
                                     bool client) {
  StreamOptions o;
  o.name = p.name;
  // Messages up to the eager limit go at once; larger ones (rendezvous payloads) wait at the
  // sender until their landing is posted. What may wait here unasked is what the peer's credits
  // and RPC slots allow, with room for its control messages.
  o.eager_max = eager_limit_;
  o.frame_max = std::max(eager_slot_size(eager_limit_), Receives::kContactMax);
  o.unexpected_max = (std::size_t{config_.credits} + 2 * std::size_t{config_.rpc_slots} + 16) * (o.frame_max + 64);
  // Its messages carry our slot for it: one tagged as another peer's is refused by the stream,
  // so no client can speak for another.
  o.tag_mask = std::uint64_t{wire::kSlotMask} << wire::kSlotShift;
  o.tag_value = std::uint64_t{p.id} << wire::kSlotShift;
  if (link == door::Link::kStreamAes || link == door::Link::kStreamChaCha) {
    o.suite = static_cast<std::uint8_t>(link == door::Link::kStreamAes ? stream::Suite::kAes256Gcm
                                                                       : stream::Suite::kChaCha20Poly1305);
    o.tx_key = client ? keys->client_to_server : keys->server_to_client;
    o.rx_key = client ? keys->server_to_client : keys->client_to_server;
  }
  return worker_->stream_endpoint(std::move(o), &EngineCore::on_ep_error, &p);
}

absl::StatusOr<door::Link> EngineCore::choose_link(PeerData& p, const Door::Admission& a) {
  // The client's worker address is checked before UCX parses it; a malformed one is refused.
  if (absl::Status valid = check_ucx_address(a.address); !valid.ok())
    return absl::InvalidArgumentError(absl::StrFormat("its UCX worker address is malformed: %s", valid.message()));
  absl::StatusOr<Endpoint> ep = absl::UnavailableError("SLUICE_CS_TRANSPORT=stream");
  if (config_.cs_transport == CsTransport::kAuto) ep = worker_->connect(a.address, &EngineCore::on_ep_error, &p);
  if (ep.ok() && (config_.ucx_tcp == UcxTcp::kYes || ep->transports().find("tcp") == std::string::npos)) {
    p.ep = std::move(*ep);
    return door::Link::kUcx;
  }
  bool encrypt = config_.encrypt == Encrypt::kOn || (a.client_link & door::kWantsEncryption) != 0;
  if (encrypt && !a.keys) {
    return absl::PermissionDeniedError(
        "encryption (SLUICE_ENCRYPT=on) needs a client that proved the key: set SLUICE_AUTH_KEY_FILE");
  }
  door::Link link = !encrypt                                                          ? door::Link::kStream
                    : stream::aes_available() && (a.client_link & door::kCanAes) != 0 ? door::Link::kStreamAes
                                                                                      : door::Link::kStreamChaCha;
  p.ep = stream_endpoint(p, link, a.keys, /*client=*/false);
  return link;
}

absl::StatusOr<Door::Admitted> EngineCore::admit(const Door::Admission& a) {
  if (closing_ || shutting_down_) return absl::UnavailableError("the server is shutting down");
  PeerData& p = peers_.add_client();
  p.name = "client " + a.name;
  p.remote_slot = a.slot;
  absl::StatusOr<door::Link> link = choose_link(p, a);
  if (!link.ok()) {
    peers_.abandon(p, std::string(link.status().message()));
    return link.status();
  }
  // The client speaks first: its HELLO, then ours (handle_hello).
  link_.connecting(p, link_.connect_deadline());
  SLUICE_LOG(kDebug, "am", "%s admitted in slot %u (%s, over %s)", p.name, p.id,
             a.authenticated ? "authenticated" : "no key", p.ep.stream() ? p.ep.transports() : "ucx");
  return Door::Admitted{p.id, *link};
}

void EngineCore::link_ready(std::uint32_t slot, int fd) {
  PeerData* p = peers_.find(slot);
  if (p == nullptr || p->state == PeerState::kDead || !p->ep.stream()) {
    ::close(fd);
    return;
  }
  p->ep.attach(fd);
}

void EngineCore::link_lost(std::uint32_t slot, const std::string& why) {
  PeerData* found = peers_.find(slot);
  if (found == nullptr) return;
  PeerData& p = *found;
  if (p.state == PeerState::kDead) return;
  Clock::time_point now = Clock::now();
  if (link_.link_lost(p, why, now)) next_timer_ = std::min(next_timer_, now + kLinkGrace);
  else fail_peer(p, absl::StatusCode::kUnavailable, why);
}

void EngineCore::transfer_failed(PeerData& p, const std::string& why) {
  // A client killed mid-transfer fails the transfer before its link closes (its memory goes
  // before its sockets): the link has kLinkGrace to say so (link_lost, which names the cause),
  // and nothing more of the client is delivered meanwhile.
  bool lost = p.link.lost();  // closed already: its grace runs
  if (p.state == PeerState::kReady && p.rank < 0 && (lost || (door_ && door_->has_link(p.id)))) {
    landings_.hold(p);
    if (!lost) link_lost(p.id, why);
    return;
  }
  fail_peer(p, absl::StatusCode::kUnavailable, why);
}

absl::Status EngineCore::attach_dialed(PeerData& p, const Door::Dialed& d) {
  if (d.link == door::Link::kUcx) {
    auto ep = worker_->connect(d.address, &EngineCore::on_ep_error, &p);
    if (!ep.ok()) {
      door_->close_link(p.id);
      return ep.status();
    }
    p.ep = std::move(*ep);
    return absl::OkStatus();
  }
  bool encrypted = d.link != door::Link::kStream;
  absl::Status refused;
  if (encrypted && !d.keys) {
    refused = absl::PermissionDeniedError("the server encrypts, but it did not prove the key (SLUICE_AUTH)");
  } else if (!encrypted && config_.encrypt == Encrypt::kOn) {
    refused = absl::PermissionDeniedError("the server does not encrypt, and SLUICE_ENCRYPT=on here");
  } else if (d.link == door::Link::kStreamAes && !stream::aes_available()) {
    refused = absl::UnavailableError("the server chose AES-256-GCM, which this CPU cannot run");
  }
  if (!refused.ok()) {
    ::close(d.fd);
    return refused;
  }
  p.ep = stream_endpoint(p, d.link, d.keys, /*client=*/true);
  p.ep.attach(d.fd);
  return absl::OkStatus();
}

absl::StatusOr<Peer*> EngineCore::connect(std::string_view host_port, std::optional<Duration> timeout) {
  if (door_ && door_->dialing()) return absl::FailedPreconditionError("connect() is already in progress");
  SLUICE_ASSIGN_OR_RETURN(HostPort hp, parse_host_port(host_port));
  Duration limit = timeout.value_or(config_.connect_timeout);
  if (limit < Duration::zero()) return absl::InvalidArgumentError("connect(): a negative timeout");
  std::string limit_name = timeout ? absl::StrFormat("connect()'s timeout of %s", format_duration(limit))
                                   : absl::StrFormat("SLUICE_CONNECT_TIMEOUT=%s", format_duration(limit));
  auto deadline = limit == kInfinite ? Clock::time_point::max() : Clock::now() + limit;
  PeerData& p = peers_.add_client();
  p.name = absl::StrFormat("server %s", host_port);
  if (absl::Status s = door().dial(hp.host, hp.port, p.id, deadline, limit_name); !s.ok()) {
    peers_.abandon(p, std::string(s.message()));
    return s;
  }
  // The pre-handshake over Sluice's own socket; the engine sleeps between its steps.
  while (door_->dialing()) {
    wait(deadline);
    (void)door_->poll(Clock::now());
  }
  absl::StatusOr<Door::Dialed> dialed = door_->take_dial_result();
  if (!dialed.ok()) {
    peers_.abandon(p, std::string(dialed.status().message()));
    return dialed.status();
  }
  if (p.state == PeerState::kDead) {  // its link closed (or broke the protocol) as soon as it opened
    return absl::UnavailableError(absl::StrFormat("cannot connect to %s: %s", host_port, p.link.fail_reason()));
  }
  p.remote_slot = dialed->slot;
  if (absl::Status s = attach_dialed(p, *dialed); !s.ok()) {
    peers_.abandon(p, std::string(s.message()));
    return absl::Status(s.code(), absl::StrFormat("cannot connect to %s: %s", host_port, s.message()));
  }
  link_.connecting(p, deadline);
  link_.send_hello(p);
  // Then the HELLOs over UCX; a failure on the way (a REJECT, the link closing, the deadline)
  // fails the peer.
  while (p.state == PeerState::kConnecting) {
    wait(deadline);
    if (Clock::now() >= deadline && p.state == PeerState::kConnecting) {
      fail_peer(p, absl::StatusCode::kDeadlineExceeded,
                absl::StrFormat("no handshake with %s within %s", host_port, limit_name));
    }
  }
  if (p.state != PeerState::kReady) {
    return absl::UnavailableError(absl::StrFormat("cannot connect to %s: %s", host_port, p.link.fail_reason()));
  }
  return p.handle.get();
}

}  // namespace sluice::detail
