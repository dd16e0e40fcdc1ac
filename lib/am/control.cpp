// HELLO both ways, control messages (credits, heartbeat, bye, reject).
#include <absl/strings/str_format.h>

#include "am/engine_core.h"
#include "core/log.h"

namespace sluice::detail {

void EngineCore::start_handshake(PeerData& p) {
  if (p.state != PeerState::kNew) return;
  absl::Status s = ensure_endpoint(p);
  if (!s.ok()) {
    fail_peer(p, absl::StatusCode::kUnavailable, std::string(s.message()));
    return;
  }
  p.state = PeerState::kConnecting;
  watch_timers();
  p.link.hello_deadline =
      config_.connect_timeout == kInfinite ? Clock::time_point::max() : Clock::now() + config_.connect_timeout;
  send_hello(p);
}

void EngineCore::refuse(PeerData& p, const std::string& why) {
  SLUICE_LOG(kError, "flow", "%s", why);
  send_ctrl(p, wire::kReject,
            std::span(reinterpret_cast<const std::byte*>(why.data()), std::min<std::size_t>(why.size(), 128)));
  fail_peer(p, absl::StatusCode::kResourceExhausted, why);
}

bool EngineCore::send_hello(PeerData& p) {
  if (p.link.hello_sent) return true;
  // Credits are receive slots set aside for this peer; never promise what the budget lacks.
  // Besides the slots its credits reserve, min(SLUICE_RX_POSTED, credits) more for the
  // receives posted for it: a handler keeping all its messages never leaves it without one.
  std::uint32_t grant = config_.credits;
  auto posted = [&](std::uint32_t g) { return std::min(config_.rx_posted, g); };
  while (grant >= 2 && !recv_pool_->eager().reserve(grant + posted(grant)).ok()) grant /= 2;
  if (grant < 2) {
    refuse(p, absl::StrFormat("cannot reserve the minimum of 2 credits and 2 posted receives (4 x %u B "
                              "receive slots) for %s: receive budget exhausted; raise "
                              "SLUICE_RECV_POOL_MAX or lower SLUICE_CREDITS",
                              recv_pool_->eager().slot_size(), p.name));
    return false;
  }
  if (grant < config_.credits) {
    SLUICE_LOG(kInfo, "flow", "%s granted %u credits, not %u: receive budget", p.name, grant, config_.credits);
  }
  p.rx.granted = grant;
  p.rx.reserved = posted(grant);
  p.rx.owed.grant(grant);
  // Reply capacity (the NFSv4.1 backchannel lesson): for the S request slots granted, 2·S send
  // slots are held back for replies, so that a reply — even while the previous one is still in
  // flight — is never refused for want of send memory that one-way sends used up.
  std::uint32_t slots = config_.rpc_slots;
  while (slots >= 1 && !send_pool_->eager().reserve(2 * std::size_t{slots}).ok()) slots /= 2;
  if (slots == 0) {
    refuse(p, absl::StrFormat("cannot hold back 2 reply slots (%u B send slots) for %s: send budget "
                              "exhausted; raise SLUICE_SEND_POOL_MAX",
                              send_pool_->eager().slot_size(), p.name));
    return false;
  }
  if (slots < config_.rpc_slots) {
    SLUICE_LOG(kInfo, "flow", "%s granted %u RPC slots, not %u: send budget for replies", p.name, slots,
               config_.rpc_slots);
  }
  p.tx.reply_reserved = 2 * slots;
  rpc_server_.grant(p, slots);
  // reply_slot: our index for the peer, which it puts in its tags to us.
  std::uint32_t me = p.rank >= 0 ? static_cast<std::uint32_t>(rank()) : wire::kClientRank;
  // Its messages can arrive once it has this HELLO: the receives for them go first.
  open_receives(p);
  wire::Hello hello{me,
                    static_cast<std::uint32_t>(engine_id_),
                    static_cast<std::uint32_t>(eager_limit_),
                    grant,
                    slots,
                    p.id,
                    incarnation_,
                    p.rx.key};
  std::array<std::byte, wire::kHelloSize> body;
  wire::encode_hello(hello, body.data());
  p.link.hello_sent = true;
  fault_.pass(FaultPoint::kHello);
  send_ctrl(p, wire::kHello, body, incarnation_);
  return true;
}

void EngineCore::send_ctrl(PeerData& p, std::uint16_t kind, std::span<const std::byte> body, std::uint64_t aux) {
  if (!p.ep.valid()) return;
  if (p.tx.ctrl_busy[kind]) {
    if (kind == wire::kCredit) p.tx.credit_again = true;  // resend when the previous completes
    return;
  }
  std::byte* buf = p.tx.ctrl_buf[kind].data();
  wire::Header h;
  h.flags = wire::kFlagCtrl;
  h.handler = kind;
  h.user_header_len = static_cast<std::uint16_t>(body.size());
  h.credits = p.state == PeerState::kReady || kind == wire::kCredit ? p.rx.owed.take() : 0;
  h.ack = p.rx.window.delivered();
  // Heartbeats carry the credits returned in all, this one's included: the peer recovers
  // returns that were lost (SendCredits::reconcile).
  h.aux = kind == wire::kPing || kind == wire::kPong ? p.rx.owed.returned() : aux;
  wire::encode(h, buf);
  if (!body.empty()) std::memcpy(buf + wire::kHeaderSize, body.data(), body.size());
  Op* op = new_op(OpKind::kCtrl, p.id);
  op->send.ctrl_kind = kind;
  op->incarnation = p.epoch;
  p.tx.ctrl_busy[kind] = true;
  c_.ctrl_sent->add();
  ++tx_inflight_;
  // On the peer's EAGER tag (in order with data, taken by a posted receive) once its HELLO
  // is here; before that it has no receive for us, and a CTRL-class message is found by probing.
  std::uint64_t tag = p.link.hello_received ? p.tx.tag : wire::make_tag(wire::kCtrl, p.remote_slot, 0);
  PostResult r = p.ep.post_send(op, buf, wire::kHeaderSize + body.size(), tag, nullptr);
  if (r.kind == Post::kDone) done_.push_back({op, absl::StatusCode::kOk, 0, 0});
  else if (r.kind == Post::kError) done_.push_back({op, r.code, 0, 0});
}

void EngineCore::on_ctrl_done(Op* op, absl::StatusCode code) {
  --tx_inflight_;
  PeerData& p = *peers_[op->peer];
  p.tx.ctrl_busy[op->send.ctrl_kind] = false;
  std::uint16_t kind = op->send.ctrl_kind;
  bool stale = op->incarnation != p.epoch;
  free_op(op);
  if (stale) return;
  if (code != absl::StatusCode::kOk) {
    if (p.state != PeerState::kDead)
      transfer_failed(p, absl::StrFormat("control message failed: %s", absl::StatusCodeToString(code)));
    return;
  }
  if (kind == wire::kDecline) landings_.send_declines(p);
  if (kind == wire::kCredit && p.tx.credit_again && p.state == PeerState::kReady) {
    p.tx.credit_again = false;
    if (p.rx.owed.owed() != 0) {
      c_.credit_msgs->add();
      send_ctrl(p, wire::kCredit, {});
    }
  }
}

void EngineCore::handle_ctrl(PeerData& p, const wire::Header& h, std::span<const std::byte> body) {
  c_.ctrl_received->add();
  if (h.handler == wire::kHello) {
    wire::Hello hello;
    bool parsed = wire::decode_hello(body, &hello) == wire::Parse::kOk;
    bool who_ok = p.rank >= 0 ? hello.rank == static_cast<std::uint32_t>(p.rank)
                              : hello.rank == wire::kClientRank && hello.reply_slot < wire::kUnassignedSlot;
    if (!parsed || !who_ok) {
      c_.parse_errors->add();
      SLUICE_LOG_RATE_LIMITED(kWarn, "wire", "malformed hello from %s rejected", p.name);
      return;
    }
    handle_hello(p, hello);
    return;
  }
  if (p.state == PeerState::kDead) {
    count_drop("control message from a dead peer");
    return;
  }
  if (h.handler == wire::kReject) {
    std::string why(reinterpret_cast<const char*>(body.data()), body.size());
    SLUICE_LOG(kError, "am", "%s refused the connection: %s", p.name, why);
    fail_peer(p, absl::StatusCode::kUnavailable, "refused by the peer: " + why);
    return;
  }
  if (p.state != PeerState::kReady) {
    count_drop("control message before the handshake");
    return;
  }
  if (h.credits != 0 && !p.tx.credits.give_back(h.credits)) {
    c_.parse_errors->add();
    SLUICE_LOG_RATE_LIMITED(kWarn, "flow", "%s returned %u credits, more than granted", p.name, h.credits);
  }
  switch (h.handler) {
    case wire::kCredit: break;
    case wire::kDecline: landings_.on_decline(p, h, body); break;
    case wire::kPing:
      reconcile_credits(p, h.aux);
      send_ctrl(p, wire::kPong, {});
      break;
    case wire::kPong:
      reconcile_credits(p, h.aux);
      if (p.link.ping_outstanding) p.traffic.sample_rtt(Clock::now() - p.link.ping_sent);
      p.link.ping_outstanding = false;
      break;
    case wire::kBye:
      // Answer, so the peer's orderly close need not wait for a goodbye of ours; close once
      // the messages it sent before its BYE (aux: the last sequence) are all in.
      send_bye(p);
      p.link.bye_received = true;
      p.link.bye_seq = h.aux;
      if (h.aux > p.rx.window.delivered() + p.rx.granted) {
        // More undelivered messages than it had credits for: not a sequence a correct peer
        // sends. Close now rather than wait for messages that cannot come.
        c_.parse_errors->add();
        SLUICE_LOG_RATE_LIMITED(kWarn, "wire", "%s said goodbye after sequence %u, beyond its credits", p.name, h.aux);
        p.link.bye_seq = p.rx.window.delivered();
      }
      close_after_bye(p);
      return;
    default:
      c_.parse_errors->add();
      SLUICE_LOG_RATE_LIMITED(kWarn, "wire", "unknown control kind %d from %s", h.handler, p.name);
      return;
  }
  flush(p);
}

void EngineCore::watch_starved_sends(PeerData& p, Clock::time_point now) {
  if (p.tx.queue.empty()) [[likely]] {
    p.tx.starved_since = {};
    p.tx.starved_logged = false;
    return;
  }
  if (p.tx.starved_since == Clock::time_point{}) {
    p.tx.starved_since = now;
    p.tx.starved_stalls = p.traffic.credit_stalls;
  }
  if (p.tx.starved_logged || now - p.tx.starved_since < config_.heartbeat) return;
  p.tx.starved_logged = true;
  SLUICE_LOG_RATE_LIMITED(
      kWarn, "flow",
      "%s holds the credits it granted us (%u of %u spent, for %s): %u of our messages wait in its send queue "
      "(SLUICE_SEND_QUEUE_MAX=%u; sends beyond it return kWouldBlock), %u credit stalls meanwhile "
      "(flow.credit_stalls). Its application keeps the Messages it received, or it does not progress",
      p.name, p.tx.credits.granted() - p.tx.credits.available(), p.tx.credits.granted(),
      format_duration(std::chrono::duration_cast<std::chrono::milliseconds>(now - p.tx.starved_since)), p.tx.queued,
      config_.send_queue_max, p.traffic.credit_stalls - p.tx.starved_stalls);
}

void EngineCore::reconcile_credits(PeerData& p, std::uint64_t peer_returned) {
  std::int64_t d = p.tx.credits.reconcile(peer_returned);
  if (d == 0) [[likely]]
    return;
  if (d > 0) {
    c_.credits_recovered->add(static_cast<std::uint64_t>(d));
    SLUICE_LOG_RATE_LIMITED(kWarn, "flow", "%s: %d returned credits were lost in transit; recovered from its heartbeat",
                            p.name, d);
  } else {
    SLUICE_LOG_RATE_LIMITED(kWarn, "flow", "%s: %d returned credits arrived twice; taken back at its heartbeat", p.name,
                            -d);
  }
}

void EngineCore::handle_hello(PeerData& p, const wire::Hello& hello) {
  if (p.link.hello_received && hello.incarnation == p.incarnation) {
    c_.duplicates->add();
    return;
  }
  if (p.state == PeerState::kDead && (hello.incarnation == p.incarnation || p.rank < 0)) {
    // A client/server peer is never revived (a reconnect is a new peer): a HELLO that arrives
    // after it failed would otherwise restart it as a rank restarts.
    count_drop("hello from a dead incarnation");
    return;
  }
  if (p.link.hello_received || p.state == PeerState::kDead) {
    // A restarted peer: whatever was towards the old incarnation is over.
    if (p.state != PeerState::kDead) fail_peer(p, absl::StatusCode::kUnavailable, "peer restarted");
    SLUICE_LOG(kInfo, "am", "%s restarted (new incarnation), reconnecting", p.name);
    ++p.epoch;  // completions of the old incarnation's operations are ignored
    revive_slot(p.id);
    p.state = PeerState::kNew;
    p.link.hello_sent = p.link.hello_received = false;
    p.tx.credits = SendCredits();
    p.rx.owed = CreditReturn();
    p.rx.unreleased = 0;
    p.tx.next_seq = 1;
    p.tx.sent_seq = 0;
    landings_.peer_restarted(p);
    p.link.bye_sent = p.link.bye_received = false;
    p.link.bye_seq = 0;
    p.rx.window = ReorderWindow<Incoming>();
    rpc_client_.grant(p, 0);
    p.link.ping_outstanding = false;
    handle_hello(p, hello);
    return;
  }
  if (hello.credits < 2) {
    fail_peer(p, absl::StatusCode::kResourceExhausted,
              absl::StrFormat("%s granted %u credits, fewer than the minimum of 2", p.name, hello.credits));
    return;
  }
  p.link.hello_received = true;
  p.incarnation = hello.incarnation;
  if (p.rank < 0) p.remote_slot = hello.reply_slot;  // client/server: learnt from the HELLO
  p.tx.tag = wire::make_tag(wire::kEager, p.remote_slot, hello.rx_key);
  p.tx.credits.grant(hello.credits);
  rpc_client_.grant(p, hello.rpc_slots);
  p.link.last_heard = Clock::now();
  if (p.state == PeerState::kNew) start_handshake(p);
  else if (!p.link.hello_sent) send_hello(p);  // a client answers the server's HELLO
  maybe_ready(p);
}

void EngineCore::send_bye(PeerData& p) {
  if (p.link.bye_sent) return;
  p.link.bye_sent = true;
  send_ctrl(p, wire::kBye, {}, p.tx.sent_seq);
}

void EngineCore::close_after_bye(PeerData& p) {
  if (!p.link.bye_received || p.state != PeerState::kReady) return;
  if (static_cast<std::int64_t>(p.rx.window.delivered() - p.link.bye_seq) < 0 || !p.landings.quiet()) return;
  fail_peer(p, absl::StatusCode::kCancelled, "peer closed (bye)");
}

void EngineCore::maybe_ready(PeerData& p) {
  if (p.state != PeerState::kConnecting || !p.link.hello_sent || !p.link.hello_received) return;
  p.state = PeerState::kReady;
  watch_timers();
  p.link.last_heard = Clock::now();
  p.link.early_since = {};
  SLUICE_LOG(kDebug, "am", "%s ready: %u credits each way granted/received %u/%u; transports %s", p.name, p.rx.granted,
             p.tx.credits.granted(), p.calls.window().granted(), p.ep.transports());
  if (p.rx.window.held() != 0) deliver(p);  // what arrived before its HELLO
  flush(p);
}

}  // namespace sluice::detail
