// Flow-control state machines (internal): credits, in-order delivery, RPC slot tables.
// Pure logic with no I/O, so each is tested directly with crafted inputs.
#pragma once

#include <cstdint>
#include <map>

namespace sluice::detail {

// Credits a sender may spend towards one peer. Never negative, never above the grant.
class SendCredits {
 public:
  void grant(std::uint32_t n) { granted_ = available_ = n; }
  // Spends `n` credits, all or none.
  bool try_consume(std::uint32_t n = 1) {
    if (available_ < n) return false;
    available_ -= n;
    return true;
  }
  // Credits the peer returned. False (and nothing changes) when they would exceed the grant:
  // a protocol error the caller counts.
  bool give_back(std::uint32_t n) {
    if (static_cast<std::uint64_t>(available_) + n > granted_) return false;
    available_ += n;
    return true;
  }
  std::uint32_t available() const { return available_; }
  std::uint32_t granted() const { return granted_; }

 private:
  std::uint32_t granted_ = 0;
  std::uint32_t available_ = 0;
};

// Credits a receiver owes back to a peer as it releases that peer's messages.
class CreditReturn {
 public:
  void grant(std::uint32_t n) { granted_ = n; }
  void released() { ++owed_; }
  // Credits to piggyback now (all that is owed).
  std::uint16_t take() {
    auto n = static_cast<std::uint16_t>(owed_);
    owed_ = 0;
    return n;
  }
  // Whether an explicit credit message is due: half the grant is owed.
  bool explicit_due() const { return owed_ != 0 && owed_ * 2 >= granted_; }
  std::uint32_t owed() const { return owed_; }

 private:
  std::uint32_t granted_ = 0;
  std::uint32_t owed_ = 0;
};

// Per-peer in-order delivery by 64-bit sequence numbers (serial arithmetic, so it survives
// wrapping). Messages ahead of the next expected one wait in a window until the gap fills.
enum class Arrival { kDeliver, kEarly, kDuplicate };

inline Arrival classify(std::uint64_t seq, std::uint64_t expected) {
  auto d = static_cast<std::int64_t>(seq - expected);
  if (d == 0) return Arrival::kDeliver;
  return d > 0 ? Arrival::kEarly : Arrival::kDuplicate;
}

template <typename T>
class ReorderWindow {
 public:
  explicit ReorderWindow(std::uint64_t first = 1) : expected_(first) {}
  // Offers a message; returns its classification. Early messages are kept; duplicates are not
  // (the caller drops them and counts). Early messages beyond `limit` ahead are refused as
  // duplicates would be: a correct sender cannot be that far ahead of its credits.
  Arrival offer(std::uint64_t seq, T&& item, std::uint32_t limit) {
    Arrival a = classify(seq, expected_);
    if (a == Arrival::kEarly) {
      if (static_cast<std::uint64_t>(seq - expected_) > limit || held_.count(seq)) return Arrival::kDuplicate;
      held_.emplace(seq, std::move(item));
    } else if (a == Arrival::kDeliver) {
      ready_ = std::move(item);
      has_ready_ = true;
    }
    return a;
  }
  // Fast path: `seq` is the next expected one and nothing waits. The caller delivers the
  // message itself; the window only advances.
  bool take_in_order(std::uint64_t seq) {
    if (seq != expected_ || has_ready_ || !held_.empty()) return false;
    ++expected_;
    return true;
  }
  // Takes the next in-order message, if any; advances the expected sequence.
  bool next(T* out) {
    if (has_ready_) {
      *out = std::move(ready_);
      has_ready_ = false;
      ++expected_;
      return true;
    }
    auto it = held_.find(expected_);
    if (it == held_.end()) return false;
    *out = std::move(it->second);
    held_.erase(it);
    ++expected_;
    return true;
  }
  std::uint64_t expected() const { return expected_; }
  std::uint64_t delivered() const { return expected_ - 1; }
  std::size_t held() const { return held_.size() + (has_ready_ ? 1 : 0); }
  void clear() {
    held_.clear();
    has_ready_ = false;
    ready_ = T();
  }

 private:
  std::uint64_t expected_;
  std::map<std::uint64_t, T> held_;
  T ready_{};
  bool has_ready_ = false;
};

// RPC request slots a server grants one client. A slot is busy from request arrival until the
// reply's send completes.
class SlotTable {
 public:
  explicit SlotTable(std::uint32_t capacity = 0) : capacity_(capacity) {}
  bool try_acquire() {
    if (busy_ >= capacity_) return false;
    ++busy_;
    return true;
  }
  void release() {
    if (busy_ > 0) --busy_;
  }
  std::uint32_t busy() const { return busy_; }
  std::uint32_t capacity() const { return capacity_; }

 private:
  std::uint32_t capacity_;
  std::uint32_t busy_ = 0;
};

}  // namespace sluice::detail
