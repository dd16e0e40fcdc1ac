// The engine's spin before it sleeps (lib/flow/spin.h): halved by sleeps that outlast it, down
// to none; doubled again by sleeps that end within SLUICE_SPIN; never above it.
#include <chrono>

#include <gtest/gtest.h>

#include "flow/spin.h"

namespace sluice::detail {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

TEST(SpinBudget, LongSleepsHalveTheSpinDownToNone) {
  SpinBudget s(microseconds(100));
  EXPECT_EQ(s.spin(), microseconds(100));
  s.slept(milliseconds(10));
  EXPECT_EQ(s.spin(), microseconds(50));
  s.slept(milliseconds(10));
  s.slept(milliseconds(10));
  EXPECT_EQ(s.spin(), std::chrono::nanoseconds(12500));
  s.slept(milliseconds(10));  // 6.25 µs is below the floor: no spin at all
  EXPECT_EQ(s.spin(), SpinBudget::Duration::zero());
  s.slept(milliseconds(10));
  EXPECT_EQ(s.spin(), SpinBudget::Duration::zero());
}

TEST(SpinBudget, ShortSleepsGrowItBackToTheMaximumAndNoFurther) {
  SpinBudget s(microseconds(100));
  for (int i = 0; i < 8; ++i) s.slept(milliseconds(1));
  ASSERT_EQ(s.spin(), SpinBudget::Duration::zero());
  s.slept(microseconds(30));  // woken within SLUICE_SPIN: polling would have caught it
  EXPECT_EQ(s.spin(), SpinBudget::kFloor);
  s.slept(microseconds(100));  // exactly the maximum still counts as within
  EXPECT_EQ(s.spin(), 2 * SpinBudget::kFloor);
  for (int i = 0; i < 10; ++i) s.slept(microseconds(5));
  EXPECT_EQ(s.spin(), microseconds(100));
}

TEST(SpinBudget, NoSpinStaysNoneAndAnEndlessOneNeverChanges) {
  SpinBudget none(SpinBudget::Duration::zero());
  none.slept(microseconds(0));
  EXPECT_EQ(none.spin(), SpinBudget::Duration::zero());
  SpinBudget endless(SpinBudget::Duration::max());
  endless.slept(milliseconds(10));
  endless.slept(microseconds(1));
  EXPECT_EQ(endless.spin(), SpinBudget::Duration::max());
}

}  // namespace
}  // namespace sluice::detail
