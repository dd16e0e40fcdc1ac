// The credit bank: grants from the receive budget, loans by demand, reclaims from idle peers.
#include "am/credit_bank.h"

#include <algorithm>

#include "am/engine_core.h"
#include "core/log.h"

namespace sluice::detail {

std::uint32_t CreditBank::cap() const { return std::max(engine().config_.credits_max, engine().config_.credits); }

std::uint32_t CreditBank::posted_for(std::uint32_t grant) const { return std::min(engine().config_.rx_posted, grant); }

std::uint32_t CreditBank::open(PeerData& p, Clock::time_point now) {
  std::size_t room = engine().recv_pool_->eager().reservable();
  std::uint32_t grant = engine().config_.credits;
  while (grant >= kFloor && cost(grant) > room) --grant;
  if (grant < kFloor) {
    short_ = true;
    return 0;
  }
  engine().recv_pool_->eager().reserve(cost(grant)).IgnoreError();  // fits: reservable() said so
  if (grant < engine().config_.credits) {
    short_ = true;
    SLUICE_LOG(kInfo, "flow", "%s granted %u credits, not %u: receive budget (lent to other peers meanwhile)", p.name(),
               grant, engine().config_.credits);
  }
  p.loan = LoanState();
  p.loan.lent_ = grant;
  p.loan.quiet_since_ = now;
  set_target(p, grant);
  Delivery::grant_receiving(p, grant);
  engine().receives_.reserve(p, posted_for(grant));
  return grant;
}

void CreditBank::close(PeerData& p) {
  std::uint32_t posted = engine().receives_.close(p);
  if (std::uint32_t granted = Delivery::take_grant(p); granted != 0)
    engine().recv_pool_->eager().unreserve(granted + posted);
  set_target(p, 0);
  if (p.loan.wanted_ != 0) {
    p.loan.wanted_ = 0;
    std::erase(waiting_, p.id());
  }
}

void CreditBank::set_target(PeerData& p, std::uint32_t target) {
  lenders_ -= p.loan.target_ > kFloor ? 1 : 0;
  lenders_ += target > kFloor ? 1 : 0;
  p.loan.target_ = target;
}

void CreditBank::set_grant(PeerData& p, std::uint32_t grant) {
  std::uint32_t old = p.rx.granted();
  PoolClass& eager = engine().recv_pool_->eager();
  if (grant > old) eager.reserve(cost(grant) - cost(old)).IgnoreError();  // the caller checked reservable()
  else eager.unreserve(cost(old) - cost(grant));
  Delivery::grant_receiving(p, grant);
  engine().receives_.resize(p, posted_for(grant));
}

bool CreditBank::on_grant(PeerData& p, std::uint64_t given_up, std::uint32_t waiting) {
  if (given_up != p.loan.given_up_) {
    // A correct peer gives back only credits it holds unspent: never below the floor, never one
    // whose message we still hold or whose return we still owe.
    std::uint64_t d = given_up - p.loan.given_up_;
    std::uint32_t granted = p.rx.granted();
    std::uint32_t in_use = p.rx.unreleased() + p.rx.owed().owed();
    if (given_up < p.loan.given_up_ || d > granted - std::max(kFloor, std::min(granted, in_use))) return false;
    p.loan.given_up_ = given_up;
    set_grant(p, granted - static_cast<std::uint32_t>(d));
    engine().c_.credits_reclaimed->add(d);
    serve_waiting();
  }
  if (waiting != 0) {
    engine().c_.credit_asks->add();
    // A peer whose credits our application holds (messages kept, not released) is not lent
    // more: that is a slow receiver, which its waiting sends must feel.
    if (p.rx.unreleased() * 2 <= p.rx.granted()) lend(p, waiting);
  }
  return true;
}

void CreditBank::lend(PeerData& p, std::uint32_t want) {
  std::uint32_t g = p.rx.granted();
  // At least double: an ask comes when the first message waits, before the rest of a burst.
  want = std::max(want, g);
  std::uint32_t room = cap() > g ? std::min(want, cap() - g) : 0;
  std::size_t budget = engine().recv_pool_->eager().reservable();
  std::uint32_t d = room;
  while (d > 0 && cost(g + d) - cost(g) > budget) --d;
  std::uint32_t unmet = room - d;
  if (unmet != 0 && p.loan.wanted_ == 0) waiting_.push_back(p.id());
  if (unmet == 0 && p.loan.wanted_ != 0) std::erase(waiting_, p.id());
  if (unmet != 0) engine().c_.credits_refused->add(unmet);
  p.loan.wanted_ = unmet;
  if (d == 0) return;
  p.loan.lent_ += d;
  set_target(p, g + d);
  set_grant(p, g + d);
  engine().c_.credits_lent->add(d);
  engine().control_.send_grant(p);
}

void CreditBank::serve_waiting() {
  // Oldest first; lend() takes a peer off the list once it has what it asked for.
  for (std::size_t i = 0; i < waiting_.size() && engine().recv_pool_->eager().reservable() != 0;) {
    std::size_t before = waiting_.size();
    PeerData& p = engine().peers_.at(waiting_[i]);
    lend(p, p.loan.wanted_);
    if (waiting_.size() == before) ++i;
  }
}

void CreditBank::tick(Clock::time_point now) {
  if (!waiting_.empty()) serve_waiting();
  bool tight = engine().recv_pool_->eager().reservable() < cost(engine().config_.credits);
  if ((waiting_.empty() && !(short_ && tight)) || lenders_ == 0) return;
  reclaim(now);
}

void CreditBank::reclaim(Clock::time_point now) {
  // Idle: nothing received from it for a heartbeat interval (as this walk saw it).
  const Duration idle_after = engine().config_.heartbeat;
  engine().peers_.for_each([&](PeerData& p) {
    if (p.state() != PeerState::kReady || p.loan.target_ <= kFloor || p.loan.wanted_ != 0) return;
    if (p.traffic.msgs_received() != p.loan.seen_msgs_) {
      p.loan.seen_msgs_ = p.traffic.msgs_received();
      p.loan.quiet_since_ = now;
      return;
    }
    if (now - p.loan.quiet_since_ < idle_after) return;
    set_target(p, kFloor);
    engine().c_.peers_recalled->add();
    engine().control_.send_grant(p);
  });
  short_ = false;
}

}  // namespace sluice::detail
