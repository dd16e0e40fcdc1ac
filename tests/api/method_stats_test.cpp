// Engine::method_stats(): each RPC method's calls, errors and latency, as the client and as the
// server saw them; the "methods" of a live-stats line are the same figures (launcher_test).
#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sluice/context.h>

#include "testing/ranks.h"

namespace sluice {
namespace {

using testing_support::RankPair;
using namespace std::chrono_literals;

constexpr HandlerId kFast = 40, kSlow = 41, kFail = 42;
constexpr HandlerId kUnknown = 2000;  // no handler can have it (above kMaxHandlers)
constexpr int kFastCalls = 40, kSlowCalls = 3, kFailCalls = 5;
constexpr auto kSlowFor = 2ms;

std::optional<MethodStats> find(const std::vector<MethodStats>& all, HandlerId method, bool server) {
  for (const MethodStats& m : all)
    if (m.method == method && m.server == server) return m;
  return std::nullopt;
}

void expect_ordered(const MethodStats& m) {
  EXPECT_GT(m.p50.count(), 0) << m.method;
  EXPECT_LE(m.p50, m.p90) << m.method;
  EXPECT_LE(m.p90, m.p99) << m.method;
  EXPECT_LE(m.p99, m.max) << m.method;
}

TEST(MethodStats, BothSidesCountCallsErrorsAndTimeTheFirstAndOneInSixteen) {
  RankPair pair;
  Engine& s = pair.engine(1);
  ASSERT_TRUE(
      s.register_handler(kFast, [](Message& m) { EXPECT_EQ(m.reply_copy({}, m.payload()), Result::kOk); }).ok());
  ASSERT_TRUE(s.register_handler(kSlow, [](Message& m) {
                 std::this_thread::sleep_for(kSlowFor);
                 EXPECT_EQ(m.reply_copy({}, {}), Result::kOk);
               }).ok());
  ASSERT_TRUE(s.register_handler(kFail, [](Message& m) {
                 EXPECT_EQ(m.reply_error(absl::NotFoundError("no such key")), Result::kOk);
               }).ok());
  std::atomic<bool> stop{false};
  pair.run(
      [&](Engine& e) {
        int done = 0, failed = 0;
        auto call = [&](HandlerId method) {
          ASSERT_EQ(e.peer(1)->call(method, {}, {}, {},
                                    [&](absl::Status st, Message&) {
                                      ++done;
                                      failed += st.ok() ? 0 : 1;
                                    }),
                    Result::kOk);
        };
        for (int i = 0; i < kFastCalls; ++i) call(kFast);
        for (int i = 0; i < kSlowCalls; ++i) call(kSlow);
        for (int i = 0; i < kFailCalls; ++i) call(kFail);
        call(kUnknown);
        int total = kFastCalls + kSlowCalls + kFailCalls + 1;
        ASSERT_TRUE(e.run_until([&] { return done == total; }, Clock::now() + 60s));
        EXPECT_EQ(failed, kFailCalls + 1);
        stop = true;
      },
      [&](Engine& e) { e.run_until([&] { return stop.load(); }, Clock::now() + 60s); });
  for (int side = 0; side < 2; ++side) {
    std::vector<MethodStats> all = pair.engine(side).method_stats();
    bool server = side == 1;
    SCOPED_TRACE(server ? "server" : "client");
    ASSERT_EQ(all.size(), 4u);
    auto fast = find(all, kFast, server), slow = find(all, kSlow, server), fail = find(all, kFail, server);
    auto unknown = find(all, kMaxHandlers, server);
    ASSERT_TRUE(fast && slow && fail && unknown);
    EXPECT_EQ(fast->calls, static_cast<std::uint64_t>(kFastCalls));
    EXPECT_EQ(fast->errors, 0u);
    EXPECT_EQ(fast->timed, 3u) << "calls 1, 17 and 33 of 40";
    expect_ordered(*fast);
    EXPECT_EQ(slow->calls, static_cast<std::uint64_t>(kSlowCalls));
    EXPECT_EQ(slow->timed, 1u) << "the first";
    EXPECT_GE(slow->p50, kSlowFor) << "the handler's sleep is inside both sides' latency";
    expect_ordered(*slow);
    EXPECT_EQ(fail->calls, static_cast<std::uint64_t>(kFailCalls));
    EXPECT_EQ(fail->errors, static_cast<std::uint64_t>(kFailCalls));
    EXPECT_EQ(unknown->calls, 1u);
    EXPECT_EQ(unknown->errors, 1u) << "Unimplemented";
  }
}

TEST(MethodStats, AnotherThreadGetsNothing) {
  RankPair pair;
  std::vector<MethodStats> seen{MethodStats{}};
  std::thread([&] { seen = pair.engine(0).method_stats(); }).join();
  EXPECT_TRUE(seen.empty());
}

}  // namespace
}  // namespace sluice
