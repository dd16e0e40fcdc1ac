// The credit bank: grants from the receive budget, loans by demand, reclaims from idle peers.
#include "am/credit_bank.h"

#include <algorithm>
#include <cstdint>

#include "am/engine_core.h"
#include "core/log.h"

namespace sluice::detail {

std::uint32_t CreditBank::credit_cap() const {
  return std::max(engine().config_.credits_max, engine().config_.credits);
}

std::uint32_t CreditBank::credit_cap(PeerData& p) const {
  if (p.loan.cap_ != 0) return p.loan.cap_;
  std::uint32_t fifo = engine().ucx_ != nullptr ? engine().ucx_->fifo_credits() : 0;
  if (fifo == 0) return p.loan.cap_ = credit_cap();
  if (!p.ep().valid()) return credit_cap();  // not known yet
  // The endpoint's lanes are asked once per connection (open() resets the loan).
  bool fifo_path = Connections::over_fifo(p);
  return p.loan.cap_ = fifo_path ? std::min(credit_cap(), std::max(fifo, engine().config_.credits)) : credit_cap();
}

std::uint32_t CreditBank::window_cap() const {
  return std::max(engine().config_.rpc_window_max, engine().config_.rpc_window);
}

std::uint32_t CreditBank::posted_for(std::uint32_t grant) const { return std::min(engine().config_.rx_posted, grant); }

std::uint32_t CreditBank::most_for(std::size_t slots) const {
  // cost(g) is 2g up to SLUICE_RX_POSTED credits, g + SLUICE_RX_POSTED beyond.
  std::size_t posted = engine().config_.rx_posted;
  std::size_t g = slots >= 2 * posted ? slots - posted : slots / 2;
  return static_cast<std::uint32_t>(std::min<std::size_t>(g, UINT32_MAX));
}

std::size_t CreditBank::for_newcomers(const PoolClass& c, std::size_t floor) {
  return std::min(kNewcomers * floor, c.budget_slots() / 16);
}

std::size_t CreditBank::beyond_floor(const PoolClass& c, std::size_t floor) {
  // At most half the room left, and never the newcomers' share: recalls free room a heartbeat
  // interval later, and the next connects (and the large classes) must not find it gone.
  std::size_t room = c.reservable(), keep = for_newcomers(c, floor);
  return std::min(room > keep ? room - keep : 0, room / 2);
}

std::uint32_t CreditBank::open(PeerData& p, Clock::time_point now) {
  const PoolClass& eager = engine().recv_pool_->eager();
  std::size_t room = eager.reservable(), spare = beyond_floor(eager, cost(kFloor));
  std::uint32_t grant = std::max(kFloor, std::min(engine().config_.credits, most_for(spare)));
  if (cost(grant) > room) {
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

std::uint32_t CreditBank::open_window(PeerData& p) {
  const std::uint32_t want = engine().config_.rpc_window;
  PoolClass& send = engine().send_pool_->eager();
  std::size_t room = send.reservable(), spare = beyond_floor(send, 2);
  auto window = static_cast<std::uint32_t>(std::min<std::size_t>(want, spare / 2));
  if (window == 0 && room >= 2) window = 1;
  if (window < want) window_short_ = true;
  if (window == 0) return 0;
  send.reserve(2 * std::size_t{window}).IgnoreError();  // fits: reservable() said so
  if (window < want) {
    SLUICE_LOG(kInfo, "flow", "%s granted an RPC window of %u, not %u: send budget for replies (held for other peers)",
               p.name(), window, want);
  }
  note_window(p, window);
  engine().sender_.hold_replies(p, 2 * window);
  engine().rpc_server_.grant(p, window);
  return window;
}

void CreditBank::note_window(PeerData& p, std::uint32_t window) {
  window_lenders_ -= p.loan.window_ > 1 ? 1 : 0;
  window_lenders_ += window > 1 ? 1 : 0;
  p.loan.window_ = window;
}

void CreditBank::widen(PeerData& p, std::uint32_t want) {
  std::uint32_t w = p.loan.window_;
  std::uint32_t cap = window_cap();
  std::uint32_t room = cap > w ? std::min(std::max(want, w), cap - w) : 0;
  auto d = static_cast<std::uint32_t>(std::min<std::size_t>(room, engine().send_pool_->eager().reservable() / 2));
  std::uint32_t unmet = room - d;
  if (unmet != 0 && p.loan.window_wanted_ == 0) window_waiting_.push_back(p.id());
  if (unmet == 0 && p.loan.window_wanted_ != 0) std::erase(window_waiting_, p.id());
  p.loan.window_wanted_ = unmet;
  if (d == 0) return;
  engine().c_.windows_widened->add(d);
  set_window(p, w + d);
}

void CreditBank::set_window(PeerData& p, std::uint32_t window) {
  std::uint32_t held = p.requests.capacity();
  if (window > held) {  // reply slots first, then the peer may use them
    engine().send_pool_->eager().reserve(2 * std::size_t{window - held}).IgnoreError();  // caller checked
    engine().sender_.hold_replies(p, 2 * window);
    engine().rpc_server_.resize(p, window);
  }
  note_window(p, window);  // a lower one takes effect once the peer keeps to it (window_kept)
  engine().control_.send_grant(p);
}

void CreditBank::window_kept(PeerData& p, std::uint32_t seen) {
  std::uint32_t held = p.requests.capacity();
  if (seen != p.loan.window_ || seen >= held) return;  // not the window we asked it to keep to
  engine().send_pool_->eager().unreserve(2 * std::size_t{held - seen});
  engine().sender_.hold_replies(p, 2 * seen);
  engine().rpc_server_.resize(p, seen);
  engine().c_.windows_reclaimed->add(held - seen);
  serve_waiting();
}

void CreditBank::close(PeerData& p) {
  std::uint32_t posted = engine().receives_.close(p);
  if (std::uint32_t granted = Delivery::take_grant(p); granted != 0)
    engine().recv_pool_->eager().unreserve(granted + posted);
  set_target(p, 0);
  note_window(p, 0);
  if (std::exchange(p.loan.wanted_, 0) != 0) std::erase(waiting_, p.id());
  if (std::exchange(p.loan.window_wanted_, 0) != 0) std::erase(window_waiting_, p.id());
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

bool CreditBank::on_grant(PeerData& p, const wire::Grant& g) {
  if (!credits_back(p, g.given_up)) return false;
  if (g.waiting != 0) {
    engine().c_.credit_asks->add();
    // A peer whose credits our application holds (messages kept, not released) is not lent
    // more: that is a slow receiver, which its waiting sends must feel.
    if (p.rx.unreleased() * 2 <= p.rx.granted()) lend(p, g.waiting);
  }
  window_kept(p, g.window_seen);
  if (g.calls_waiting != 0) widen(p, g.calls_waiting);
  return true;
}

bool CreditBank::credits_back(PeerData& p, std::uint64_t given_up) {
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
  return true;
}

void CreditBank::lend(PeerData& p, std::uint32_t want) {
  std::uint32_t g = p.rx.granted();
  // At least double: an ask comes when the first message waits, before the rest of a burst.
  want = std::max(want, g);
  std::uint32_t cap = credit_cap(p);
  std::uint32_t room = cap > g ? std::min(want, cap - g) : 0;
  std::size_t budget = engine().recv_pool_->eager().reservable();
  std::uint32_t d = std::min(room, most_for(budget + cost(g)) - g);
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
  // Oldest first; lend() and widen() take a peer off its list once it has what it asked for.
  for (std::size_t i = 0; i < waiting_.size() && engine().recv_pool_->eager().reservable() != 0;) {
    std::size_t before = waiting_.size();
    PeerData& p = engine().peers_.at(waiting_[i]);
    lend(p, p.loan.wanted_);
    if (waiting_.size() == before) ++i;
  }
  for (std::size_t i = 0; i < window_waiting_.size() && engine().send_pool_->eager().reservable() >= 2;) {
    std::size_t before = window_waiting_.size();
    PeerData& p = engine().peers_.at(window_waiting_[i]);
    widen(p, p.loan.window_wanted_);
    if (window_waiting_.size() == before) ++i;
  }
}

void CreditBank::tick(Clock::time_point now) {
  if (waiting() != 0) serve_waiting();
  // A short HELLO stays the walks' cause until a full one fits again: in a storm of connects
  // the first walks find every lender too young to recall.
  if (short_ && beyond_floor(engine().recv_pool_->eager(), cost(kFloor)) >= cost(engine().config_.credits))
    short_ = false;
  if (window_short_ && beyond_floor(engine().send_pool_->eager(), 2) >= 2 * std::size_t{engine().config_.rpc_window})
    window_short_ = false;
  bool credits = (!waiting_.empty() || short_) && lenders_ != 0;
  bool windows = (!window_waiting_.empty() || window_short_) && window_lenders_ != 0;
  if ((credits || windows) && now >= next_walk_) {
    next_walk_ = now + engine().config_.heartbeat / 4;
    reclaim(now, credits, windows);
  }
}

bool CreditBank::busy() const {
  return waiting() != 0 || (short_ && lenders_ != 0) || (window_short_ && window_lenders_ != 0);
}

void CreditBank::reclaim(Clock::time_point now, bool credits, bool windows) {
  // Idle: nothing received from it for a heartbeat interval (as this walk saw it).
  const Duration idle_after = engine().config_.heartbeat;
  engine().peers_.for_each([&](PeerData& p) {
    bool has_credits = credits && p.loan.target_ > kFloor && p.loan.wanted_ == 0;
    bool has_window = windows && p.loan.window_ > 1 && p.loan.window_wanted_ == 0;
    if (p.state() != PeerState::kReady || !(has_credits || has_window)) return;
    if (p.traffic.msgs_received() != p.loan.seen_msgs_) {
      p.loan.seen_msgs_ = p.traffic.msgs_received();
      p.loan.quiet_since_ = now;
      return;
    }
    if (now - p.loan.quiet_since_ < idle_after) return;
    if (has_credits) set_target(p, kFloor);
    if (has_window) note_window(p, 1);
    engine().c_.peers_recalled->add();
    engine().control_.send_grant(p);
  });
}

}  // namespace sluice::detail
