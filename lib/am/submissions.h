// Work other threads hand an engine with back-pressure (internal; Engine::submit()). A bounded
// queue: a producer waits while it is full; the engine thread runs each attempt from progress()
// and, while one answers kWouldBlock, retries it after the engine has done something (a
// completion, a credit) rather than in a loop, with later attempts waiting behind it in order.
#pragma once

#include <absl/functional/any_invocable.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>

#include <sluice/engine.h>

namespace sluice::detail {

class Submissions {
 public:
  using Attempt = absl::AnyInvocable<Result()>;
  static constexpr std::size_t kCapacity = 4096;

  // Any thread. kOk once queued; kWouldBlock when the queue stayed full until `deadline`;
  // kUnavailable once the engine closes. `wake` wakes the engine thread.
  template <typename Wake>
  Result push(Attempt&& attempt, Clock::time_point deadline, Wake&& wake) {
    std::unique_lock lock(mu_);
    if (!room_.wait_until(lock, deadline, [&] { return closed_ || queued_ < kCapacity; })) return Result::kWouldBlock;
    if (closed_) return Result::kUnavailable;
    ++queued_;
    incoming_.push_back(std::move(attempt));
    has_incoming_.store(true, std::memory_order_release);
    lock.unlock();
    wake();
    return Result::kOk;
  }

  // Engine thread: whether anything is queued or waiting to be retried.
  bool has_incoming() const { return has_incoming_.load(std::memory_order_acquire); }
  bool retrying() const { return !ready_.empty(); }
  bool empty() const { return ready_.empty() && !has_incoming(); }
  // Engine thread: runs attempts in order until one answers kWouldBlock (it stays first).
  // Returns how many ran to an answer.
  std::size_t run();
  // Engine thread, closing: no more pushes (kUnavailable); waiting producers are woken. The
  // attempts left are destroyed unrun; returns how many.
  std::size_t close();

 private:
  std::mutex mu_;
  std::condition_variable room_;
  std::deque<Attempt> incoming_;  // under mu_
  std::size_t queued_ = 0;        // under mu_: incoming_ and ready_ together
  bool closed_ = false;           // under mu_
  std::atomic<bool> has_incoming_{false};
  bool running_ = false;       // engine thread: an attempt that progresses the engine does not re-enter
  std::deque<Attempt> ready_;  // engine thread: taken from incoming_, in order
};

}  // namespace sluice::detail
