#include "am/submissions.h"

namespace sluice::detail {

std::size_t Submissions::run() {
  if (running_) return 0;
  running_ = true;
  if (has_incoming()) {
    std::lock_guard lock(mu_);
    for (Attempt& a : incoming_) ready_.push_back(std::move(a));
    incoming_.clear();
    has_incoming_.store(false, std::memory_order_relaxed);
  }
  std::size_t answered = 0;
  while (!ready_.empty() && ready_.front()() != Result::kWouldBlock) {
    ready_.pop_front();
    ++answered;
  }
  running_ = false;
  if (answered != 0) {
    {
      std::lock_guard lock(mu_);
      queued_ -= answered;
    }
    room_.notify_all();
  }
  return answered;
}

std::size_t Submissions::close() {
  std::size_t left;
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    left = queued_;
    incoming_.clear();
    queued_ = 0;
    has_incoming_.store(false, std::memory_order_relaxed);
  }
  ready_.clear();
  room_.notify_all();
  return left;
}

}  // namespace sluice::detail
