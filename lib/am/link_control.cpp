// Link control: HELLO both ways, REJECT, BYE, and the control messages a link receives.
#include <absl/strings/str_format.h>

#include "am/engine_core.h"
#include "core/log.h"

namespace sluice::detail {

void LinkControl::start_handshake(PeerData& p) {
  if (p.state() != PeerState::kNew) return;
  absl::Status s = engine().peers_.ensure_endpoint(p);
  if (!s.ok()) {
    engine().fail_peer(p, absl::StatusCode::kUnavailable, std::string(s.message()));
    return;
  }
  connecting(p, connect_deadline());
  send_hello(p);
}

void LinkControl::connecting(PeerData& p, Clock::time_point deadline, bool dialed) {
  p.link.state_ = PeerState::kConnecting;
  p.link.dialed_ = dialed;
  watch(p.link, p.id());
  p.link.hello_deadline_ = deadline;
}

Clock::time_point LinkControl::connect_deadline() const {
  return engine().config_.connect_timeout == kInfinite ? Clock::time_point::max()
                                                       : Clock::now() + engine().config_.connect_timeout;
}

void LinkControl::reject(PeerData& p, const std::string& why) {
  SLUICE_LOG(kError, "flow", "%s", why);
  engine().control_.send(
      p, wire::kReject,
      std::span(reinterpret_cast<const std::byte*>(why.data()), std::min<std::size_t>(why.size(), 128)));
  engine().fail_peer(p, absl::StatusCode::kResourceExhausted, why);
}

bool LinkControl::send_hello(PeerData& p) {
  if (p.link.hello_sent_) return true;
  // Credits are receive slots set aside for this peer; never promise what the budget lacks.
  // Besides the slots its credits reserve (a receive is posted in each), min(SLUICE_RX_POSTED,
  // credits) more: a handler keeping all its messages never leaves it without a receive.
  std::uint32_t grant = engine().bank_.open(p, Clock::now());
  if (grant == 0) {
    reject(p, absl::StrFormat("cannot reserve the minimum of 2 credits and 2 posted receives (4 x %u B "
                              "receive slots) for %s: receive budget exhausted (every other peer holds "
                              "its minimum or is busy); raise SLUICE_RECV_POOL_MAX or lower SLUICE_CREDITS",
                              engine().recv_pool_->eager().slot_size(), p.name()));
    return false;
  }
  // Reply capacity (the NFSv4.1 backchannel lesson): for an RPC window of W requests, 2·W send
  // slots are held back for replies, so that a reply — even while the previous one is still in
  // flight — is never refused for want of send memory that one-way sends used up.
  std::uint32_t window = engine().bank_.open_window(p);
  if (window == 0) {
    reject(p, absl::StrFormat("cannot hold back 2 reply slots (%u B send slots) for %s: send budget "
                              "exhausted (every other peer holds its minimum or is busy); raise SLUICE_SEND_POOL_MAX",
                              engine().send_pool_->eager().slot_size(), p.name()));
    return false;
  }
  // reply_index: our index for the peer, which it puts in its tags to us.
  std::uint32_t me = p.rank() >= 0 ? static_cast<std::uint32_t>(engine().rank()) : wire::kClientRank;
  // Its messages can arrive once it has this HELLO: the receives for them go first.
  engine().receives_.open(p);
  wire::Hello hello{me,
                    static_cast<std::uint32_t>(engine().engine_id_),
                    static_cast<std::uint32_t>(engine().eager_limit_),
                    grant,
                    window,
                    p.id(),
                    engine().incarnation_,
                    p.posted.key()};
  std::array<std::byte, wire::kHelloSize> body;
  wire::encode_hello(hello, body.data());
  p.link.hello_sent_ = true;
  engine().fault_.pass(FaultPoint::kHello);
  engine().control_.send(p, wire::kHello, body, engine().incarnation_);
  return true;
}

void LinkControl::handle_ctrl(PeerData& p, const wire::Header& h, std::span<const std::byte> body) {
  engine().c_.ctrl_received->add();
  if (h.handler == wire::kHello) {
    wire::Hello hello;
    bool parsed = wire::decode_hello(body, &hello) == wire::Parse::kOk;
    bool who_ok = p.rank() >= 0 ? hello.rank == static_cast<std::uint32_t>(p.rank())
                                : hello.rank == wire::kClientRank && hello.reply_index < wire::kUnassignedIndex;
    if (!parsed || !who_ok) {
      engine().c_.parse_errors->add();
      SLUICE_LOG_RATE_LIMITED(kWarn, "wire", "malformed hello from %s rejected", p.name());
      return;
    }
    handle_hello(p, hello);
    return;
  }
  if (p.state() == PeerState::kDead) {
    engine().c_.dropped("control message from a dead peer");
    return;
  }
  if (h.handler == wire::kReject) {
    std::string why(reinterpret_cast<const char*>(body.data()), body.size());
    SLUICE_LOG(kError, "am", "%s refused the connection: %s", p.name(), why);
    engine().fail_peer(p, absl::StatusCode::kUnavailable, "refused by the peer: " + why);
    return;
  }
  if (p.state() != PeerState::kReady) {
    engine().c_.dropped("control message before the handshake");
    return;
  }
  if (h.credits != 0 && !Sender::credits_back(p.tx, h.credits)) {
    engine().c_.parse_errors->add();
    SLUICE_LOG_RATE_LIMITED(kWarn, "flow", "%s returned %u credits, more than granted", p.name(), h.credits);
  }
  switch (h.handler) {
    case wire::kCredit: break;
    case wire::kDecline: engine().landings_.on_decline(p, h, body); break;
    case wire::kPing:
      engine().sender_.reconcile_credits(p, h.aux);
      engine().control_.send(p, wire::kPong, {});
      break;
    case wire::kPong:
      engine().sender_.reconcile_credits(p, h.aux);
      on_pong(p);
      break;
    case wire::kBye: on_bye(p, h); return;
    case wire::kGrant: {
      wire::Grant g;
      wire::Parse pr = wire::decode_grant(body, &g);
      if (pr != wire::Parse::kOk || !engine().sender_.on_loan(p, g) || !engine().bank_.on_grant(p, g)) {
        engine().c_.parse_errors->add();
        SLUICE_LOG_RATE_LIMITED(kWarn, "flow", "%s sent a GRANT no correct peer sends (%s); ignored", p.name(),
                                pr != wire::Parse::kOk ? wire::to_string(pr) : "counts out of range");
        return;
      }
      engine().rpc_client_.regrant(p, g.window);
      break;
    }
    default:
      engine().c_.parse_errors->add();
      SLUICE_LOG_RATE_LIMITED(kWarn, "wire", "unknown control kind %d from %s", h.handler, p.name());
      return;
  }
  engine().sender_.flush(p);
  engine().sender_.settle(p);  // credits back: unspent ones above the target go
}

void LinkControl::on_pong(PeerData& p) {
  if (p.link.ping_outstanding_) p.traffic.sample_rtt(Clock::now() - p.link.ping_sent_);
  p.link.ping_outstanding_ = false;
}

void LinkControl::on_bye(PeerData& p, const wire::Header& h) {
  // Answer, so the peer's orderly close need not wait for a goodbye of ours; close once the
  // messages it sent before its BYE (aux: the last sequence) are all in.
  send_bye(p);
  p.link.bye_received_ = true;
  p.link.bye_seq_ = h.aux;
  if (h.aux > p.rx.window().delivered() + p.rx.granted()) {
    // More undelivered messages than it had credits for: not a sequence a correct peer sends.
    // Close now rather than wait for messages that cannot come.
    engine().c_.parse_errors->add();
    SLUICE_LOG_RATE_LIMITED(kWarn, "wire", "%s said goodbye after sequence %u, beyond its credits", p.name(), h.aux);
    p.link.bye_seq_ = p.rx.window().delivered();
  }
  close_after_bye(p);
}

void LinkControl::handle_hello(PeerData& p, const wire::Hello& hello) {
  SLUICE_LOG(kDebug, "am", "%s: HELLO of incarnation %x granting %u credits (we are %s)", p.name(), hello.incarnation,
             hello.credits, to_string(p.state()));
  if (p.link.hello_received_ && hello.incarnation == p.link.incarnation_) {
    engine().c_.duplicates->add();
    return;
  }
  if (p.state() == PeerState::kDead && (hello.incarnation == p.link.incarnation_ || p.rank() < 0)) {
    // A client/server peer is never revived (a reconnect is a new peer): a HELLO that arrives
    // after it failed would otherwise restart it as a rank restarts.
    engine().c_.dropped("hello from a dead incarnation");
    return;
  }
  if (p.link.hello_received_ || p.state() == PeerState::kDead) {
    restart(p, hello);
    return;
  }
  if (hello.credits < 2) {
    engine().fail_peer(p, absl::StatusCode::kResourceExhausted,
                       absl::StrFormat("%s granted %u credits, fewer than the minimum of 2", p.name(), hello.credits));
    return;
  }
  p.link.hello_received_ = true;
  p.link.incarnation_ = hello.incarnation;
  if (p.rank() < 0) PeerTable::set_remote_index(p, hello.reply_index);  // client/server: learnt from the HELLO
  engine().sender_.connect(p, wire::make_tag(wire::kEager, p.remote_index(), hello.rx_key), hello.credits);
  engine().rpc_client_.grant(p, hello.rpc_window);
  p.link.last_heard_ = Clock::now();
  if (p.state() == PeerState::kNew) start_handshake(p);
  else if (!p.link.hello_sent_) send_hello(p);  // a client answers the server's HELLO
  maybe_ready(p);
}

void LinkControl::restart(PeerData& p, const wire::Hello& hello) {
  if (p.state() != PeerState::kDead) engine().fail_peer(p, absl::StatusCode::kUnavailable, "peer restarted");
  SLUICE_LOG(kInfo, "am", "%s restarted (new incarnation), reconnecting", p.name());
  ++p.link.epoch_;  // completions of the old incarnation's operations are ignored
  engine().receives_.revive_index(p.id());
  p.link.state_ = PeerState::kNew;
  // The handshake and the goodbye start over; why it failed and its endpoint's close stay.
  p.link.hello_sent_ = p.link.hello_received_ = false;
  p.link.bye_sent_ = p.link.bye_received_ = false;
  p.link.bye_seq_ = 0;
  p.link.ping_outstanding_ = false;
  engine().sender_.restart(p);
  Delivery::restart_receiving(p);
  engine().landings_.peer_restarted(p);
  engine().rpc_client_.grant(p, 0);
  handle_hello(p, hello);
}

void LinkControl::send_bye(PeerData& p) {
  if (p.link.bye_sent_) return;
  p.link.bye_sent_ = true;
  engine().control_.send(p, wire::kBye, {}, p.tx.sent_seq());
}

void LinkControl::close_after_bye(PeerData& p) {
  if (!p.link.bye_received_ || p.state() != PeerState::kReady) return;
  if (static_cast<std::int64_t>(p.rx.window().delivered() - p.link.bye_seq_) < 0 || !p.landings.quiet()) return;
  engine().fail_peer(p, absl::StatusCode::kCancelled, "peer closed (bye)");
}

void LinkControl::maybe_ready(PeerData& p) {
  if (p.state() != PeerState::kConnecting || !p.link.hello_sent_ || !p.link.hello_received_) return;
  p.link.state_ = PeerState::kReady;
  watch(p.link, p.id());
  p.link.last_heard_ = Clock::now();
  p.link.early_since_ = {};
  SLUICE_LOG(kDebug, "am", "%s ready: %u credits each way granted/received %u/%u; transports %s", p.name(),
             p.rx.granted(), p.tx.credits().granted(), p.calls.window().granted(), p.ep().transports());
  if (p.rx.window().held() != 0) engine().delivery_.deliver(p);  // what arrived before its HELLO
  engine().sender_.flush(p);
}

}  // namespace sluice::detail
