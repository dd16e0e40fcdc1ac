// The peer table: rank peers made on first use, client/server peers in slots reused once
// nothing of a gone one is left, endpoints, and a peer's failure with all it had in flight;
// the front door's glue (listen, connect, admission, lost links).

#include <unistd.h>

#include <algorithm>

#include <absl/strings/str_format.h>

#include "am/engine_core.h"
#include "core/log.h"
#include "core/net.h"
#include "transport/stream_crypto.h"
#include "transport/ucx_address.h"

namespace sluice::detail {

// ---- peers ---------------------------------------------------------------------------------

PeerData* EngineCore::create_rank_peer(int rank) {
  auto& slot = peers_[static_cast<std::size_t>(rank)];
  slot = std::make_unique<PeerData>();
  slot->id = static_cast<std::uint32_t>(rank);
  slot->rank = rank;
  slot->name = absl::StrFormat("rank %d", rank);
  slot->handle.reset(new Peer(this, slot.get(), slot->id, rank));
  rpc_server_.grant(*slot, config_.rpc_slots);
  slot->remote_slot = static_cast<std::uint32_t>(this->rank());
  return slot.get();
}

PeerData* EngineCore::peer_by_slot_slow(std::uint32_t slot) {
  if (slot < static_cast<std::uint32_t>(ranks_)) return peer_by_rank(static_cast<int>(slot));
  return nullptr;
}

Peer* EngineCore::no_such_rank(int rank) const {
  SLUICE_LOG_RATE_LIMITED(kWarn, "api", "Engine::peer(%d): no such rank (the job has %d): nullptr", rank, ranks_);
  return nullptr;
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
  p.rx.window_.clear();
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
  if (p.rx.granted_ != 0) {
    recv_pool_->eager().unreserve(p.rx.granted_ + posted);
    p.rx.granted_ = 0;
  }
  sender_.release_held(p);
  rpc_server_.grant(p, config_.rpc_slots);
  if (p.rank < 0) gone_cs_.push_back(p.id);
}

void EngineCore::count_drop(const char* what) {
  c_.dropped_dead->add();
  SLUICE_LOG_RATE_LIMITED(kInfo, "am", "dropped a message: %s", what);
}

// A gone client's slot may serve a new one once nothing refers to the old one any more: no
// operation of it in the transport, no message of it the application holds, no call to it
// open, no endpoint callback still to come, nothing with its slot in UCX's unexpected queue.
// Completions of the old incarnation then see a stale epoch.
bool EngineCore::reusable(const PeerData& p) const {
  if (p.state != PeerState::kDead || p.link.close_pending() || p.rx.unreleased_ != 0 || p.landings.landing() != 0 ||
      std::find(failed_eps_.begin(), failed_eps_.end(), p.id) != failed_eps_.end())
    return false;
  // Its receive ops are the slot's own and serve the next client (Receives::open) once their
  // cancellation has come back.
  for (const Op& op : ops_)
    if (op.in_use && op.peer == p.id && (op.kind != OpKind::kRx || op.recv.busy || op.recv.queued)) return false;
  if (rpc_client_.has_calls_to(p)) return false;
  // Nothing of it may wait in UCX either: a later client numbers its messages from 1 again, and
  // a rendezvous payload tag (slot and sequence) the old one left would match the new one's.
  constexpr std::uint64_t kSlotBits = std::uint64_t{wire::kSlotMask} << wire::kSlotShift;
  return !worker_->has_unexpected(std::uint64_t{p.id} << wire::kSlotShift, kSlotBits);
}

PeerData& EngineCore::new_cs_peer() {
  // The oldest gone clients first, a few per connection: one that stays unusable (a message of
  // it that UCX keeps) goes to the back instead of being looked at on every connection.
  for (std::size_t tries = std::min<std::size_t>(gone_cs_.size(), 16); tries > 0; --tries) {
    std::uint32_t id = gone_cs_.front();
    gone_cs_.pop_front();
    PeerData& old = *peers_[id];
    if (!reusable(old)) {
      gone_cs_.push_back(id);
      continue;
    }
    old.handle->data_ = &gone_peer_;
    gone_handles_.push_back(std::move(old.handle));
    PeerData fresh;
    fresh.id = old.id;
    fresh.epoch = old.epoch + 1;  // whatever of the old client still completes is stale
    Receives::carry(old, fresh);
    old = std::move(fresh);
    c_.peers_reused->add();
    receives_.revive_slot(id);
    SLUICE_LOG(kDebug, "am", "client slot %u serves a new client (%zu slots, %zu gone)", id, peers_.size(),
               gone_cs_.size());
    return init_cs_peer(old);
  }
  auto p = std::make_unique<PeerData>();
  p->id = static_cast<std::uint32_t>(peers_.size());
  SLUICE_LOG(kDebug, "am", "client slot %u is new (%zu gone, none free)", p->id, gone_cs_.size());
  peers_.push_back(std::move(p));
  return init_cs_peer(*peers_.back());
}

PeerData& EngineCore::init_cs_peer(PeerData& p) {
  p.rank = -1;
  p.name = absl::StrFormat("client slot %u", p.id);
  p.remote_slot = wire::kUnassignedSlot;
  p.handle.reset(new Peer(this, &p, p.id, -1));
  rpc_server_.grant(p, config_.rpc_slots);
  return p;
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

void EngineCore::abandon_cs_peer(PeerData& p, const std::string& why) {
  p.state = PeerState::kDead;
  LinkControl::abandoned(p.link, why);
  gone_cs_.push_back(p.id);
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
  PeerData& p = new_cs_peer();
  p.name = "client " + a.name;
  p.remote_slot = a.slot;
  absl::StatusOr<door::Link> link = choose_link(p, a);
  if (!link.ok()) {
    abandon_cs_peer(p, std::string(link.status().message()));
    return link.status();
  }
  // The client speaks first: its HELLO, then ours (handle_hello).
  link_.connecting(p, link_.connect_deadline());
  SLUICE_LOG(kDebug, "am", "%s admitted in slot %u (%s, over %s)", p.name, p.id,
             a.authenticated ? "authenticated" : "no key", p.ep.stream() ? p.ep.transports() : "ucx");
  return Door::Admitted{p.id, *link};
}

void EngineCore::link_ready(std::uint32_t slot, int fd) {
  PeerData* p = slot < peers_.size() ? peers_[slot].get() : nullptr;
  if (p == nullptr || p->state == PeerState::kDead || !p->ep.stream()) {
    ::close(fd);
    return;
  }
  p->ep.attach(fd);
}

void EngineCore::link_lost(std::uint32_t slot, const std::string& why) {
  if (slot >= peers_.size() || !peers_[slot]) return;
  PeerData& p = *peers_[slot];
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
  PeerData& p = new_cs_peer();
  p.name = absl::StrFormat("server %s", host_port);
  if (absl::Status s = door().dial(hp.host, hp.port, p.id, deadline, limit_name); !s.ok()) {
    abandon_cs_peer(p, std::string(s.message()));
    return s;
  }
  // The pre-handshake over Sluice's own socket; the engine sleeps between its steps.
  while (door_->dialing()) {
    wait(deadline);
    (void)door_->poll(Clock::now());
  }
  absl::StatusOr<Door::Dialed> dialed = door_->take_dial_result();
  if (!dialed.ok()) {
    abandon_cs_peer(p, std::string(dialed.status().message()));
    return dialed.status();
  }
  if (p.state == PeerState::kDead) {  // its link closed (or broke the protocol) as soon as it opened
    return absl::UnavailableError(absl::StrFormat("cannot connect to %s: %s", host_port, p.link.fail_reason()));
  }
  p.remote_slot = dialed->slot;
  if (absl::Status s = attach_dialed(p, *dialed); !s.ok()) {
    abandon_cs_peer(p, std::string(s.message()));
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
