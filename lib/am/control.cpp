// Control messages out: each kind from its peer's buffer, one of a kind in flight at once.
#include <absl/strings/str_format.h>

#include "am/engine_core.h"
#include "core/log.h"

namespace sluice::detail {

void Control::send(PeerData& p, std::uint16_t kind, std::span<const std::byte> body, std::uint64_t aux) {
  if (!p.ep().valid()) return;
  if (p.ctrl.busy_[kind]) {
    // Resent when the previous completes (a GRANT with the counts of then).
    if (kind == wire::kCredit) p.ctrl.credit_again_ = true;
    if (kind == wire::kGrant) p.ctrl.grant_again_ = true;
    return;
  }
  std::byte* buf = p.ctrl.buf_[kind].data();
  wire::Header h;
  h.flags = wire::kFlagCtrl;
  h.handler = kind;
  h.user_header_len = static_cast<std::uint16_t>(body.size());
  h.credits = p.state() == PeerState::kReady || kind == wire::kCredit ? Delivery::take_owed(p.rx) : 0;
  h.ack = p.rx.window().delivered();
  // Heartbeats carry the credits returned in all, this one's included: the peer recovers
  // returns that were lost (SendCredits::reconcile).
  h.aux = kind == wire::kPing || kind == wire::kPong ? p.rx.owed().returned() : aux;
  wire::encode(h, buf);
  if (!body.empty()) std::memcpy(buf + wire::kHeaderSize, body.data(), body.size());
  Op* op = engine().ops_.take(OpKind::kCtrl, p.id());
  op->send.ctrl_kind = kind;
  op->epoch = p.epoch();
  p.ctrl.busy_[kind] = true;
  engine().c_.ctrl_sent->add();
  ++inflight_;
  // On the peer's EAGER tag (in order with data, taken by a posted receive) once its HELLO
  // is here; before that it has no receive for us, and a CTRL-class message is found by probing.
  std::uint64_t tag = p.link.hello_received() ? p.tx.tag() : wire::make_tag(wire::kCtrl, p.remote_index(), 0);
  PostResult r = p.ep().post_send(op, buf, wire::kHeaderSize + body.size(), tag, nullptr);
  if (r.kind == Post::kDone) engine().done_.push_back({op, absl::StatusCode::kOk, 0, 0});
  else if (r.kind == Post::kError) engine().done_.push_back({op, r.code, 0, 0});
}

void Control::on_done(Op* op, absl::StatusCode code) {
  --inflight_;
  PeerData& p = engine().peers_.at(op->peer);
  p.ctrl.busy_[op->send.ctrl_kind] = false;
  std::uint16_t kind = op->send.ctrl_kind;
  bool stale = op->epoch != p.epoch();
  engine().ops_.give(op);
  if (stale) return;
  if (code != absl::StatusCode::kOk) {
    if (p.state() != PeerState::kDead)
      engine().connections_.transfer_failed(
          p, absl::StrFormat("control message failed: %s", absl::StatusCodeToString(code)));
    return;
  }
  if (kind == wire::kDecline) engine().landings_.send_declines(p);
  if (kind == wire::kGrant && std::exchange(p.ctrl.grant_again_, false) && p.state() == PeerState::kReady)
    send_grant(p);
  if (kind == wire::kCredit && p.ctrl.credit_again_ && p.state() == PeerState::kReady) {
    p.ctrl.credit_again_ = false;
    if (p.rx.owed().owed() != 0) {
      engine().c_.credit_msgs->add();
      send(p, wire::kCredit, {});
    }
  }
}

void Control::return_credits(PeerData& p) {
  engine().fault_.pass(FaultPoint::kCreditReturn);
  engine().c_.credit_msgs->add();
  send(p, wire::kCredit, {});
}

void Control::send_grant(PeerData& p) {
  std::array<std::byte, wire::kGrantSize> body;
  auto count = [](std::size_t n) { return static_cast<std::uint32_t>(std::min<std::size_t>(n, UINT32_MAX)); };
  wire::encode_grant({p.loan.lent(), p.tx.credits().given_up(), p.loan.target(), count(p.tx.queued()), p.loan.window(),
                      p.calls.kept(), count(p.calls.queued())},
                     body.data());
  send(p, wire::kGrant, body);
}

}  // namespace sluice::detail
