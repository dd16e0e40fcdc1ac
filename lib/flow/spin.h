// How long an engine busy-polls after its last work before it sleeps (internal, pure). It starts
// at, and never exceeds, SLUICE_SPIN. A sleep that outlasted the spin halves it, down to none:
// polling longer would not have caught what woke the engine. A sleep that ended within it
// doubles it again (from kFloor): polling would have caught the next wake-up without a sleep.
// This is the rule of Linux KVM's halt polling (halt_poll_ns, grown and shrunk per wake-up).
#pragma once

#include <algorithm>
#include <chrono>

namespace sluice::detail {

class SpinBudget {
 public:
  using Duration = std::chrono::nanoseconds;
  static constexpr Duration kFloor = std::chrono::microseconds(8);

  // `max`: SLUICE_SPIN; Duration::max() never sleeps, so never adapts.
  explicit SpinBudget(Duration max) : max_(max), spin_(max) {}
  Duration spin() const { return spin_; }
  // The engine slept `how_long` after spinning for spin().
  void slept(Duration how_long) {
    if (max_ == Duration::max()) return;
    if (how_long <= max_) spin_ = std::min(max_, std::max(2 * spin_, kFloor));
    else spin_ = spin_ / 2 < kFloor ? Duration::zero() : spin_ / 2;
  }

 private:
  Duration max_;
  Duration spin_;
};

}  // namespace sluice::detail
