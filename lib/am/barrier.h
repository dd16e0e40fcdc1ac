// The engine's barrier (internal; Engine::barrier()): each rank tells every other one, in an
// ordered message on the same channel as its data, that it entered barrier number `epoch`; a
// rank leaves once every other rank's word is in. As the word travels behind everything its
// sender sent before, leaving means those messages have all been delivered here.
#pragma once

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <map>
#include <vector>

#include <absl/status/status.h>

#include <sluice/message.h>

namespace sluice::detail {

// The handler id the barrier's messages carry: above every application id (kMaxHandlers).
inline constexpr HandlerId kBarrierHandler = 0xFFFF;

class Barrier {
 public:
  // Enters the next barrier among `ranks` ranks; returns its number.
  std::uint64_t enter(int ranks, int self) {
    ++epoch_;
    unsent_.assign(static_cast<std::size_t>(ranks), true);
    unsent_[static_cast<std::size_t>(self)] = false;
    return epoch_;
  }
  std::uint64_t epoch() const { return epoch_; }
  // Ranks our word has not reached the transport for yet (a send that would block is retried).
  bool unsent(int rank) const { return unsent_[static_cast<std::size_t>(rank)]; }
  void sent(int rank) { unsent_[static_cast<std::size_t>(rank)] = false; }
  // Rank `from`'s word for barrier `epoch` arrived (it may be ahead of us by one); a second
  // word from the same rank for the same barrier counts once.
  void arrived(std::uint64_t epoch, int from) {
    std::vector<int>& ranks = arrived_[epoch];
    if (std::find(ranks.begin(), ranks.end(), from) == ranks.end()) ranks.push_back(from);
  }
  std::uint64_t arrivals(std::uint64_t epoch) const {
    auto it = arrived_.find(epoch);
    return it == arrived_.end() ? 0 : it->second.size();
  }
  void leave(std::uint64_t epoch) { arrived_.erase(epoch); }

 private:
  std::uint64_t epoch_ = 0;
  std::vector<bool> unsent_;
  std::map<std::uint64_t, std::vector<int>> arrived_;  // by barrier: the ranks whose word is in
};

class EngineCore;

// Engine::barrier()'s engine side (barrier.cpp): entering, sending our word to every rank, the
// words that arrive, leaving.
class RankBarrier {
 public:
  explicit RankBarrier([[maybe_unused]] EngineCore& e) { assert(&engine() == &e); }
  RankBarrier(const RankBarrier&) = delete;
  RankBarrier& operator=(const RankBarrier&) = delete;

  // Enter (its number); then, on each pass, send what waits and say whether every other
  // rank's word is in (*done), or why it cannot be (a rank failed).
  std::uint64_t enter();
  absl::Status status(std::uint64_t epoch, bool* done);
  absl::Status timed_out(std::uint64_t epoch) const;
  // A rank's word arrived (a message for kBarrierHandler).
  void word(const Message& m);

 private:
  EngineCore& engine() const;  // the engine holding this (EngineCore::of)
  Barrier barrier_;
};

}  // namespace sluice::detail
