// The timers' visit schedule (lib/flow/visits.h) with a hand-driven clock: watched peers are
// visited every tick, sleepers only when their time comes, a watch wakes a sleeper, and a tick
// visits each peer once however often it was watched.
#include <chrono>
#include <map>
#include <vector>

#include <gtest/gtest.h>

#include "flow/visits.h"

namespace sluice::detail {
namespace {

using Time = VisitSchedule::Time;
using std::chrono::milliseconds;

class VisitScheduleTest : public ::testing::Test {
 protected:
  // One tick at `now`; each visited index answers what `next_` says (kWatch by default).
  std::vector<std::uint32_t> tick(Time now) {
    std::vector<std::uint32_t> seen;
    s_.tick(now, [&](std::uint32_t i) {
      seen.push_back(i);
      auto it = next_.find(i);
      return it == next_.end() ? VisitSchedule::kWatch : it->second;
    });
    return seen;
  }
  VisitSchedule s_;
  std::map<std::uint32_t, Time> next_;
  Time t0_ = Time{} + std::chrono::hours(1);
};

TEST_F(VisitScheduleTest, AWatchedPeerIsVisitedEveryTickUntilItSleeps) {
  s_.watch(3);
  s_.watch(3);  // once, however often
  EXPECT_EQ(tick(t0_), (std::vector<std::uint32_t>{3}));
  EXPECT_EQ(tick(t0_ + milliseconds(50)), (std::vector<std::uint32_t>{3}));
  next_[3] = t0_ + milliseconds(1000);
  EXPECT_EQ(tick(t0_ + milliseconds(100)), (std::vector<std::uint32_t>{3}));
  EXPECT_FALSE(s_.busy());
  EXPECT_EQ(s_.next_due(), t0_ + milliseconds(1000));
  EXPECT_TRUE(tick(t0_ + milliseconds(150)).empty()) << "asleep until its deadline";
  EXPECT_TRUE(tick(t0_ + milliseconds(999)).empty());
  next_[3] = VisitSchedule::kForget;
  EXPECT_EQ(tick(t0_ + milliseconds(1000)), (std::vector<std::uint32_t>{3}));
  EXPECT_TRUE(tick(t0_ + milliseconds(5000)).empty()) << "forgotten";
  EXPECT_EQ(s_.sleeping(), 0u);
}

TEST_F(VisitScheduleTest, SleepersAreVisitedInTheOrderOfTheirDeadlinesOnlyWhenDue) {
  for (std::uint32_t i = 0; i < 5; ++i) s_.sleep(i, t0_ + milliseconds(100 * (5 - i)));
  EXPECT_EQ(s_.sleeping(), 5u);
  for (std::uint32_t i = 0; i < 5; ++i) next_[i] = VisitSchedule::kForget;
  EXPECT_EQ(tick(t0_ + milliseconds(250)), (std::vector<std::uint32_t>{4, 3}));
  EXPECT_EQ(tick(t0_ + milliseconds(600)), (std::vector<std::uint32_t>{2, 1, 0}));
}

TEST_F(VisitScheduleTest, AWatchWakesASleeperAndItsOldDeadlineNoLongerCounts) {
  s_.sleep(7, t0_ + milliseconds(100));
  s_.watch(7);
  next_[7] = t0_ + milliseconds(900);
  EXPECT_EQ(tick(t0_), (std::vector<std::uint32_t>{7})) << "watched: visited at once";
  EXPECT_TRUE(tick(t0_ + milliseconds(100)).empty()) << "its first deadline went with the watch";
  EXPECT_EQ(tick(t0_ + milliseconds(900)), (std::vector<std::uint32_t>{7}));
}

TEST_F(VisitScheduleTest, APeerWatchedDuringItsOwnVisitStaysWatchedWhateverTheVisitSays) {
  s_.watch(1);
  s_.tick(t0_, [&](std::uint32_t i) {
    s_.watch(i);  // a message came while its timers ran
    return t0_ + milliseconds(500);
  });
  EXPECT_TRUE(s_.busy());
  EXPECT_EQ(tick(t0_ + milliseconds(50)), (std::vector<std::uint32_t>{1}));
}

TEST_F(VisitScheduleTest, PeersWatchedDuringATickWaitForTheNextAndATickInsideAVisitDoesNothing) {
  s_.watch(1);
  std::vector<std::uint32_t> inner;
  s_.tick(t0_, [&](std::uint32_t i) {
    s_.watch(2);
    s_.tick(t0_, [&](std::uint32_t j) {  // a callback that progresses the engine
      inner.push_back(j);
      return VisitSchedule::kWatch;
    });
    return i == 1 ? VisitSchedule::kForget : VisitSchedule::kWatch;
  });
  EXPECT_TRUE(inner.empty());
  next_[2] = VisitSchedule::kForget;
  EXPECT_EQ(tick(t0_ + milliseconds(50)), (std::vector<std::uint32_t>{2}));
}

TEST_F(VisitScheduleTest, ADeadlineAlreadyPastIsNotVisitedTwiceInOneTick) {
  s_.watch(4);
  int visits = 0;
  s_.tick(t0_, [&](std::uint32_t) {
    ++visits;
    return t0_ - milliseconds(10);  // a silence that is already over
  });
  EXPECT_EQ(visits, 1);
  EXPECT_EQ(tick(t0_ + milliseconds(1)), (std::vector<std::uint32_t>{4}));
}

TEST_F(VisitScheduleTest, StaleEntriesAreDroppedSoTheHeapStaysBoundedByThePeers) {
  // A peer that wakes and sleeps again many times leaves an entry each time.
  for (int round = 0; round < 10000; ++round) {
    s_.sleep(0, t0_ + milliseconds(1000 + round));
    s_.watch(0);
    next_[0] = t0_ + milliseconds(1000 + round);
    tick(t0_);
  }
  EXPECT_EQ(s_.sleeping(), 1u);
  EXPECT_LE(s_.entries(), 2u + 64u + 1u) << "10,000 sleeps of one peer";
  next_[0] = VisitSchedule::kForget;
  EXPECT_EQ(tick(t0_ + milliseconds(20000)), (std::vector<std::uint32_t>{0})) << "one visit, not one per entry";
}

}  // namespace
}  // namespace sluice::detail
