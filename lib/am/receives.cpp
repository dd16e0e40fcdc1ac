// Posted receives: each peer's, re-posted as they are consumed; first contact and stragglers
// taken from UCX's unexpected queue.
#include "am/receives.h"

#include <algorithm>
#include <cassert>
#include <utility>

#include "am/engine_core.h"
#include "core/log.h"

namespace sluice::detail {

void Receives::reserve(PeerData& p, std::uint32_t n) { p.posted.reserved_ = n; }

void Receives::carry(PeerData& from, PeerData& to) { to.posted = std::move(from.posted); }

std::uint32_t Receives::slots_for(const PeerData& p) { return p.rx.granted() + p.posted.reserved_; }

bool Receives::full(const PeerData& p) { return p.posted.held_ >= slots_for(p); }

Result Receives::take_slot(PeerData& p, Slot* out) {
  Result r = engine().recv_pool_->eager().try_take(out);
  if (r == Result::kOk) ++p.posted.held_;
  return r;
}

void Receives::give_back(PeerData& p, Slot slot) {
  assert(p.posted.held_ > 0);
  slot.release();
  --p.posted.held_;
  if (!p.posted.parked_.empty()) [[unlikely]]
    unpark(p);
}

void Receives::unpark(PeerData& p) {
  unposted_.insert(unposted_.end(), p.posted.parked_.begin(), p.posted.parked_.end());
  p.posted.parked_.clear();
}

void Receives::post_waiting() {
  if (engine().closing_) return;
  while (!unposted_.empty()) {
    Op* op = unposted_.back();
    PeerData& p = engine().peers_.at(op->peer);
    if (p.posted.key_ == 0 || op->recv.key != p.posted.key_) [[unlikely]] {
      // The peer failed (its receives stay idle until it returns), or was granted again with
      // fewer posted receives than this op's index.
      if (op->slot) give_back(p, std::move(op->slot));
      op->recv.queued = false;
      unposted_.pop_back();
      continue;
    }
    // Posted twice, one op's completions would take each other's slots (the check caught
    // open_receives re-queueing an op whose cancellation had not been handled).
    assert(!op->recv.busy);
    // An operation usually still holds the slot it last received into (see on_rx). One whose
    // slot a kept message took waits while the peer holds all it may (give_back).
    if (!op->slot) [[unlikely]] {
      if (full(p)) {
        p.posted.parked_.push_back(op);
        unposted_.pop_back();
        continue;
      }
      if (take_slot(p, &op->slot) != Result::kOk) return;  // all reserved slots held: retry later
    }
    // Exact: UCX finds it in a hash. (Any receive with a partial mask would make UCX walk a
    // list of those for every arriving message.)
    absl::StatusCode r = engine().worker_->post_recv_exact(p.ep(), op, slot_data(op->slot), slot_size(op->slot),
                                                           p.posted.tag_, slot_memh(op->slot));
    if (r != absl::StatusCode::kOk) [[unlikely]] {
      SLUICE_LOG_RATE_LIMITED(kError, "am", "cannot post a receive: %s", absl::StatusCodeToString(r));
      give_back(p, std::move(op->slot));
      return;
    }
    op->recv.queued = false;
    op->recv.busy = true;
    unposted_.pop_back();
    // Completed inside the post: its message was waiting in UCX, so the peer has more in flight
    // than receives posted. One more, while its credits allow.
    if (op->request == nullptr && p.posted.want_ < slots_for(p)) [[unlikely]] {
      engine().c_.receives_grown->add();
      arm(p, p.posted.want_++);
    }
  }
}

void Receives::open(PeerData& p) {
  p.posted.key_ = next_key_ = next_key_ % wire::kIdMask + 1;  // never 0, never reused in 2^36
  p.posted.tag_ = wire::make_tag(wire::kEager, p.id(), p.posted.key_);
  p.posted.want_ = p.posted.reserved_;
  // Ops still busy under the old key (cancelled, their completion not yet handled) come back
  // through on_rx and are posted under the new one.
  fit(p);
}

void Receives::resize(PeerData& p, std::uint32_t n) {
  p.posted.reserved_ = n;
  p.posted.want_ = std::clamp(p.posted.want_, n, slots_for(p));
  if (p.posted.key_ != 0) fit(p);  // else opened later, with n
}

void Receives::arm(PeerData& p, std::size_t i) {
  if (i == p.posted.ops_.size()) {
    Op* op = engine().ops_.take(OpKind::kRx, p.id());
    p.posted.ops_.push_back(op);
    all_.push_back(op);
  }
  Op* op = p.posted.ops_[i];
  op->recv.key = p.posted.key_;
  if (!op->recv.busy && !op->recv.queued) {
    op->recv.queued = true;
    unposted_.push_back(op);
  }
}

void Receives::fit(PeerData& p) {
  unpark(p);
  const std::uint32_t n = p.posted.want_;
  for (std::size_t i = 0; i < std::max<std::size_t>(n, p.posted.ops_.size()); ++i) {
    Op* op = i < p.posted.ops_.size() ? p.posted.ops_[i] : nullptr;
    if (i < n) {
      arm(p, i);
    } else if (op->recv.key != 0) {
      // Not re-posted when it comes back (post_waiting); one posted under this key is
      // cancelled (one still busy under an old key was cancelled when its peer failed).
      if (op->recv.busy && op->recv.key == p.posted.key_) engine().worker_->cancel(op);
      op->recv.key = 0;
    }
  }
}

std::uint32_t Receives::close(PeerData& p) {
  std::uint32_t reserved = std::exchange(p.posted.reserved_, 0);
  if (p.posted.key_ == 0) return reserved;
  for (Op* op : p.posted.ops_) engine().worker_->cancel(op);
  // What the peer sent before it failed may still arrive, and a peer that was only stopped
  // (declared dead, then resumed) goes on sending: no receive takes those now, so they are
  // taken out of UCX's unexpected queue and dropped (counted), not left to pin its memory.
  constexpr std::uint64_t kAnyId = wire::kClassMask | (std::uint64_t{wire::kIndexMask} << wire::kIndexShift);
  constexpr auto kDead = Clock::time_point::max();
  stale_tags_.push_back({wire::make_tag(wire::kEager, p.id(), p.posted.key_), kFullMask, p.id(), kDead});
  stale_tags_.push_back({wire::make_tag(wire::kRndv, p.id(), 0), kAnyId, p.id(), kDead});
  stale_tags_.push_back({wire::make_tag(wire::kReply, p.id(), 0), kAnyId, p.id(), kDead});
  p.posted.key_ = 0;
  unpark(p);  // dropped by post_waiting
  return reserved;
}

void Receives::take_first_contacts() {
  // A HELLO (or REJECT) from a peer that has no receive of ours yet, or one that the peer sent
  // before our HELLO reached it. All that waits, up to a bound per call: a peer flooding this
  // class must not grow UCX's unexpected queue faster than it is drained.
  for (int i = 0; i < 256; ++i) {
    Worker::Unexpected u = engine().worker_->take_unexpected(wire::make_tag(wire::kCtrl, 0, 0), wire::kClassMask);
    if (u.message == nullptr || !receive_unexpected(u)) return;
  }
}

void Receives::revive_index(std::uint32_t index) {
  auto until = Clock::now() + kStragglerWindow;
  std::erase_if(stale_tags_, [&](const Straggler& s) { return s.index == index && s.mask != kFullMask; });
  for (Straggler& s : stale_tags_)
    if (s.index == index) s.until = std::min(s.until, until);
}

void Receives::purge_stragglers(Clock::time_point now) {
  for (std::size_t i = 0; i < stale_tags_.size();) {
    Worker::Unexpected u;
    while ((u = engine().worker_->take_unexpected(stale_tags_[i].tag, stale_tags_[i].mask)).message != nullptr) {
      if (!receive_unexpected(u)) return;
    }
    if (now >= stale_tags_[i].until) {
      stale_tags_[i] = stale_tags_.back();
      stale_tags_.pop_back();
    } else {
      ++i;
    }
  }
}

bool Receives::receive_unexpected(const Worker::Unexpected& u) {
  // Into the heap: these are few, small (a HELLO, a REJECT) and belong to no peer's receive
  // reservation. A larger one is cut short by UCX (MESSAGE_TRUNCATED) and dropped.
  Op* op = engine().ops_.take(OpKind::kContactRx, 0);
  std::size_t room = std::clamp<std::size_t>(u.length, 1, kContactMax);
  op->heap.reset(new std::byte[room]);
  ++contact_inflight_;
  PostResult r = engine().worker_->post_recv_message(op, u, op->heap.get(), room, nullptr);
  if (r.kind == Post::kError) {
    on_contact_rx(op, r.code, 0, 0);
    return false;
  }
  // An arrived message completes inside the post (its callback queued the completion last):
  // handled now, so that a HELLO taken because the peer's data arrived is in before that data.
  if (r.kind == Post::kDone) {
    on_contact_rx(op, absl::StatusCode::kOk, u.length, u.tag);
  } else if (!engine().done_.empty() && engine().done_.back().op == op) {
    Completion c = engine().done_.back();
    engine().done_.pop_back();
    on_contact_rx(op, c.code, c.length, c.tag);
  }
  return true;
}

void Receives::on_contact_rx(Op* op, absl::StatusCode code, std::size_t length, std::uint64_t tag) {
  --contact_inflight_;
  if (wire::tag_class(tag) != wire::kCtrl && code != absl::StatusCode::kCancelled) {
    engine().c_.dropped("sent to a closed connection");  // a larger one was cut short (truncated): dropped too
  } else if (code != absl::StatusCode::kOk) {
    SLUICE_LOG_RATE_LIMITED(kWarn, "am", "receiving an unexpected message failed: %s", absl::StatusCodeToString(code));
  } else {
    engine().delivery_.accept_contact(std::span<std::byte>(op->heap.get(), length), tag);
  }
  engine().ops_.give(op);
}

void Receives::cancel_all() {
  for (Op* op : all_) engine().worker_->cancel(op);
}

bool Receives::busy() const {
  if (contact_inflight_ != 0) return true;
  for (Op* op : all_)
    if (op->request != nullptr) return true;
  return false;
}

void Receives::drop_unmatched() {
  for (Worker::Unexpected u; (u = engine().worker_->take_unexpected(0, 0)).message != nullptr;)
    if (!receive_unexpected(u)) break;
}

}  // namespace sluice::detail
