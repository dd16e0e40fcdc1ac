// When each peer's timers are looked at (internal, pure): a peer with something going on is
// watched, visited on every timer tick; a quiet one sleeps until its own next deadline (a
// heartbeat, its silence), kept in a min-heap. A tick costs what the watched peers and the
// deadlines that came cost, not the number of peers.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

namespace sluice::detail {

class VisitSchedule {
 public:
  using Time = std::chrono::steady_clock::time_point;
  // What a visit decides for its peer: visited again next tick, asleep until a time, or gone.
  static constexpr Time kWatch = Time::min();
  static constexpr Time kForget = Time::max();

  // `index` is visited on every tick from now on (once, however often it is watched).
  void watch(std::uint32_t index) {
    grow(index);
    due_[index] = kForget;  // any sleep it had is over (its heap entry goes stale)
    if (listed_[index]) return;
    listed_[index] = 1;
    watched_.push_back(index);
  }
  // `index` is visited at `due`, not before (unless watched meanwhile).
  void sleep(std::uint32_t index, Time due) {
    grow(index);
    if (listed_[index]) return;  // watched again while it was visited: that wins
    due_[index] = due;
    heap_.push_back({due, index});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
    if (heap_.size() > 2 * due_.size() + 64) compact();
  }
  // Visits every watched peer, then every sleeper whose time has come. `visit(index)` returns
  // kWatch, a time to sleep until, or kForget. Peers watched during a visit are visited on the
  // next tick; a visit that runs a tick of its own (a callback that progresses) finds it done.
  template <typename Visit>
  void tick(Time now, Visit&& visit) {
    if (ticking_) return;
    ticking_ = true;
    visiting_.swap(watched_);
    for (std::uint32_t index : visiting_) {
      listed_[index] = 0;
      decide(index, visit(index), now);
    }
    visiting_.clear();
    while (!heap_.empty() && heap_.front().due <= now) {
      Entry e = heap_.front();
      std::pop_heap(heap_.begin(), heap_.end(), Later{});
      heap_.pop_back();
      if (due_[e.index] != e.due || listed_[e.index]) continue;  // stale: it slept again, or woke
      due_[e.index] = kForget;
      decide(e.index, visit(e.index), now);
    }
    ticking_ = false;
  }
  // Some peer is watched: the next tick is due at the tick interval.
  bool busy() const { return !watched_.empty(); }
  // The earliest sleeper's time (kForget when none sleeps; a stale entry may make it early).
  Time next_due() const { return heap_.empty() ? kForget : heap_.front().due; }
  std::size_t watched() const { return watched_.size(); }
  std::size_t entries() const { return heap_.size(); }  // stale ones included
  std::size_t sleeping() const {
    return static_cast<std::size_t>(std::count_if(due_.begin(), due_.end(), [](Time t) { return t != kForget; }));
  }

 private:
  struct Entry {
    Time due;
    std::uint32_t index;
  };
  struct Later {
    bool operator()(const Entry& a, const Entry& b) const { return a.due > b.due; }
  };

  void grow(std::uint32_t index) {
    if (index < due_.size()) return;
    due_.resize(index + 1, kForget);
    listed_.resize(index + 1, 0);
  }
  void decide(std::uint32_t index, Time next, Time now) {
    if (next == kWatch) watch(index);
    else if (next != kForget) sleep(index, std::max(next, now + std::chrono::nanoseconds(1)));  // not this tick again
  }
  // Drops the stale entries: one per sleeper is left.
  void compact() {
    std::erase_if(heap_, [&](const Entry& e) { return due_[e.index] != e.due; });
    std::make_heap(heap_.begin(), heap_.end(), Later{});
  }

  std::vector<std::uint32_t> watched_;
  std::vector<std::uint32_t> visiting_;  // this tick's watched, while they are visited
  std::vector<Entry> heap_;              // min-heap by due; an entry whose due is not due_'s is stale
  std::vector<Time> due_;                // by index: when it sleeps until (kForget: not asleep)
  std::vector<std::uint8_t> listed_;     // by index: in watched_ (or being visited this tick)
  bool ticking_ = false;
};

}  // namespace sluice::detail
