// Flow-control state machines (internal): credits, in-order delivery, RPC windows (the
// server's and the caller's side), the table of a caller's outstanding calls.
// Pure logic with no I/O, so each is tested directly with crafted inputs.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace sluice::detail {

// Credits a sender may spend towards one peer. Never negative, never above the grant. The
// receiver lends more and asks some back (its GRANT: what it lent in all, the target): a
// credit above the target is given up as soon as it is unspent, never while in use.
class SendCredits {
 public:
  static constexpr std::uint32_t kNoTarget = UINT32_MAX;
  void grant(std::uint32_t n) {
    granted_ = available_ = n;
    returned_ = 0;
    lent_ = n;
    given_up_ = 0;
    target_ = kNoTarget;
  }
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
    returned_ += n;
    return true;
  }
  // The peer's own count of the credits it has returned since the grant (its heartbeats carry
  // it): a return lost on the way is made good, one that arrived twice is taken back (as far
  // as it is unspent). Heartbeats travel in order with every message that returns credits, so
  // the counts compare exactly. Returns the difference applied.
  std::int64_t reconcile(std::uint64_t peer_returned) {
    auto d = static_cast<std::int64_t>(peer_returned - returned_);
    returned_ = peer_returned;
    if (d > 0)
      available_ = static_cast<std::uint32_t>(std::min<std::uint64_t>(granted_, std::uint64_t{available_} + d));
    else available_ -= static_cast<std::uint32_t>(std::min<std::uint64_t>(available_, static_cast<std::uint64_t>(-d)));
    return d;
  }
  // The peer's GRANT: `lent` credits in all since its HELLO, of which we may keep `target`.
  // Counts are absolute: a repeated or older one adds nothing. False (nothing changes) when
  // the grant would pass kMaxGrant, which no receiver lends.
  static constexpr std::uint32_t kMaxGrant = 1u << 16;
  bool loan(std::uint64_t lent, std::uint32_t target) {
    std::uint64_t more = lent > lent_ ? lent - lent_ : 0;
    if (granted_ + more > kMaxGrant) return false;
    granted_ += static_cast<std::uint32_t>(more);
    available_ += static_cast<std::uint32_t>(more);
    lent_ += more;
    target_ = target;
    return true;
  }
  // Gives up unspent credits above the target, keeping at least `keep` (what the send queue's
  // next tagged message needs); returns how many went.
  std::uint32_t settle(std::uint32_t keep) {
    std::uint32_t floor = std::max(target_, keep);
    if (granted_ <= floor) return 0;
    std::uint32_t n = std::min(available_, granted_ - floor);
    granted_ -= n;
    available_ -= n;
    given_up_ += n;
    return n;
  }
  bool above_target() const { return granted_ > target_; }
  std::uint32_t available() const { return available_; }
  std::uint32_t granted() const { return granted_; }
  // Credits granted in all (the HELLO's and the loans since), and given up in all.
  std::uint64_t lent() const { return lent_; }
  std::uint64_t given_up() const { return given_up_; }
  std::uint32_t target() const { return target_; }

 private:
  std::uint32_t granted_ = 0;
  std::uint32_t available_ = 0;
  std::uint64_t returned_ = 0;  // credits given back since the grant
  std::uint64_t lent_ = 0;
  std::uint64_t given_up_ = 0;
  std::uint32_t target_ = kNoTarget;
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
    returned_ += n;
    return n;
  }
  // Credits returned in all (what heartbeats carry, for SendCredits::reconcile at the peer).
  std::uint64_t returned() const { return returned_; }
  // Whether an explicit credit message is due: half the grant is owed.
  bool explicit_due() const { return owed_ != 0 && owed_ * 2 >= granted_; }
  std::uint32_t owed() const { return owed_; }

 private:
  std::uint32_t granted_ = 0;
  std::uint32_t owed_ = 0;
  std::uint64_t returned_ = 0;
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

// The RPC window a server grants one client: how many of its requests may be unanswered at
// once. A request enters when it arrives and leaves when its reply is handed over (answer):
// the caller counts the place free as soon as it has the reply, and may send its next request
// before this side has seen that reply's send complete — over TCP the two race, and a place
// held until the completion refused the next request (the NFSv4.1 backchannel failure). A
// reply still in flight is counted apart until its send completes (reply_done); its send
// buffer is the second half of the 2 x window send slots held back for replies. A caller
// within its grant thus never meets a full window.
class RequestWindow {
 public:
  explicit RequestWindow(std::uint32_t capacity = 0) : capacity_(capacity) {}
  // A new capacity (a loan, or a lower window the caller said it keeps to); requests admitted
  // stay.
  void resize(std::uint32_t capacity) { capacity_ = capacity; }
  bool try_admit() {
    if (busy_ >= capacity_) return false;
    ++busy_;
    return true;
  }
  // The request's reply is handed over (sent, or queued to be sent).
  void answer() {
    if (busy_ > 0) --busy_;
    ++replying_;
  }
  // That reply's send has completed (or failed).
  void reply_done() {
    if (replying_ > 0) --replying_;
  }
  // A reply whose send completed at once.
  void release() {
    answer();
    reply_done();
  }
  std::uint32_t busy() const { return busy_; }
  std::uint32_t replying() const { return replying_; }
  std::uint32_t capacity() const { return capacity_; }

 private:
  std::uint32_t capacity_;
  std::uint32_t busy_ = 0;
  std::uint32_t replying_ = 0;
};

// The caller's side of one server's RPC window: at most `granted` requests are outstanding
// (sent or in the send queue, not yet answered); the rest wait in the caller's call queue. A
// place is freed by the reply (or by the call's end when no reply can come: the request's send failed,
// the server declined its payload). A server that restarts or a connection that fails starts
// the window again at 0: nothing may go until the next HELLO grants one.
// Invariant: outstanding() <= granted() whenever the window granted was at least what it had
// outstanding; a lower new grant lets nothing start until enough replies came back.
class CallWindow {
 public:
  void grant(std::uint32_t window) { granted_ = window; }
  // The peer failed or restarted: nothing is granted and nothing is outstanding.
  void reset() { granted_ = outstanding_ = 0; }
  bool may_start() const { return outstanding_ < granted_; }
  // A request leaves (or is queued to leave); the caller checked may_start().
  void start() { ++outstanding_; }
  // Its reply came (or it ended without one): its place is free.
  void finish() {
    if (outstanding_ > 0) --outstanding_;
  }
  std::uint32_t granted() const { return granted_; }
  std::uint32_t outstanding() const { return outstanding_; }

 private:
  std::uint32_t granted_ = 0;
  std::uint32_t outstanding_ = 0;
};

// A caller's outstanding calls, by id, without hashing: an id is (index << kSeqBits) | sequence,
// where index is the call's entry (20 bits) and sequence a counter (28 bits), 48 bits in all,
// what the compact wire header carries. An id comes back only after 2^28 calls, so a stale one
// (a late reply, a cancel after completion) finds nothing, and its low 36 bits — what a REPLY
// tag carries — are as unique among outstanding calls as a plain counter's. Entries are
// reused last-freed first (warm in cache), and never move: a T* stays valid until its erase.
// They live in chunks of 256 found by shift and mask (a std::deque's indexing cost the client
// about 95 instructions per call in its three look-ups).
template <typename T>
class CallTable {
 public:
  static constexpr int kSeqBits = 28;
  static constexpr int kIndexBits = 20;
  static constexpr std::size_t kMaxCalls = std::size_t{1} << kIndexBits;
  static constexpr std::uint64_t kSeqMask = (std::uint64_t{1} << kSeqBits) - 1;

  // The id the next call will have, its entry set aside (find() does not see it yet); 0 when
  // kMaxCalls are outstanding. Then emplace() makes it, or unreserve() gives it back.
  std::uint64_t reserve() {
    if (free_.empty() && !grow()) [[unlikely]]
      return 0;
    std::uint32_t index = free_.back();
    free_.pop_back();
    std::uint64_t id = (std::uint64_t{index} << kSeqBits) | next_seq_;
    next_seq_ = next_seq_ == kSeqMask ? 1 : next_seq_ + 1;  // 2^28 calls before it wraps
    return id;
  }
  template <typename... Args>
  T& emplace(std::uint64_t id, Args&&... args) {
    Entry& e = at(static_cast<std::uint32_t>(id >> kSeqBits));
    e.id = id;
    return e.value.emplace(std::forward<Args>(args)...);
  }
  void unreserve(std::uint64_t id) { free_.push_back(static_cast<std::uint32_t>(id >> kSeqBits)); }
  // A new T(args...) and its id; {0, nullptr} when kMaxCalls are outstanding.
  template <typename... Args>
  std::pair<std::uint64_t, T*> insert(Args&&... args) {
    std::uint64_t id = reserve();
    if (id == 0) [[unlikely]]
      return {0, nullptr};
    return {id, &emplace(id, std::forward<Args>(args)...)};
  }
  T* find(std::uint64_t id) {
    std::uint64_t index = id >> kSeqBits;
    if (index >= made_) return nullptr;
    Entry& e = at(static_cast<std::uint32_t>(index));
    return e.id == id ? &*e.value : nullptr;
  }
  // Removes the call `id` (which find() returned). Inline: every reply passes here.
  [[gnu::always_inline]] void erase(std::uint64_t id) {
    auto index = static_cast<std::uint32_t>(id >> kSeqBits);
    Entry& e = at(index);
    e.id = 0;
    e.value.reset();
    free_.push_back(index);
  }
  // Ids of the calls that satisfy pred(const T&), in index order (to act on after the walk).
  template <typename Pred>
  std::vector<std::uint64_t> ids_where(Pred&& pred) const {
    std::vector<std::uint64_t> out;
    for (std::uint32_t i = 0; i < made_; ++i) {
      const Entry& e = chunks_[i >> kChunkBits][i & kChunkMask];
      if (e.id != 0 && pred(*e.value)) out.push_back(e.id);
    }
    return out;
  }
  std::size_t size() const { return made_ - free_.size(); }
  bool empty() const { return size() == 0; }
  void clear() {
    chunks_.clear();
    free_.clear();
    made_ = 0;
  }

 private:
  static constexpr int kChunkBits = 8;
  static constexpr std::uint32_t kChunk = 1u << kChunkBits;
  static constexpr std::uint32_t kChunkMask = kChunk - 1;
  struct Entry {
    std::uint64_t id = 0;  // 0: free
    std::optional<T> value;
  };
  Entry& at(std::uint32_t index) { return chunks_[index >> kChunkBits][index & kChunkMask]; }
  // A chunk more, its entries free (the lowest taken first); false at kMaxCalls. Out of line,
  // so that insert() stays small enough to inline.
  [[gnu::noinline]] bool grow() {
    if (made_ >= kMaxCalls) return false;
    chunks_.push_back(std::make_unique<Entry[]>(kChunk));
    made_ += kChunk;
    for (std::uint32_t i = made_; i > made_ - kChunk; --i) free_.push_back(i - 1);
    return true;
  }

  std::vector<std::unique_ptr<Entry[]>> chunks_;  // kChunk entries each; an entry never moves
  std::uint32_t made_ = 0;                        // entries made (in use or free)
  std::vector<std::uint32_t> free_;
  std::uint64_t next_seq_ = 1;
};

}  // namespace sluice::detail
