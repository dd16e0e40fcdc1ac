// Two engines in one process (two ranks of an in-process group), over the real UCX transports.
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sluice/context.h>

#include "testing/ranks.h"

namespace sluice {
namespace {

using testing_support::RankPair;
using testing_support::bytes_of;

TEST(TwoEngines, EagerMessagesArriveInOrderWithIntactBytes) {
  RankPair pair;
  constexpr int kCount = 20000;
  std::vector<int> got;
  ASSERT_TRUE(pair.engine(1).register_handler(7, [&](Message& m) {
    int v;
    ASSERT_EQ(m.payload().size(), sizeof(v));
    std::memcpy(&v, m.payload().data(), sizeof(v));
    got.push_back(v);
  }).ok());
  int completed = 0;
  pair.run([&](Engine& e) {
    Peer* p = e.peer(1);
    for (int i = 0; i < kCount;) {
      Result r = p->send(7, {}, bytes_of(i), [&](absl::Status s) {
        EXPECT_TRUE(s.ok()) << s;
        ++completed;
      });
      if (r == Result::kWouldBlock) {
        e.progress();
        continue;
      }
      ASSERT_EQ(r, Result::kOk);
      ++i;
    }
    e.run_until([&] { return completed == kCount; }, Clock::now() + std::chrono::seconds(30));
  }, [&](Engine& e) {
    e.run_until([&] { return got.size() == kCount; }, Clock::now() + std::chrono::seconds(30));
  });
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kCount));
  for (int i = 0; i < kCount; ++i) ASSERT_EQ(got[static_cast<std::size_t>(i)], i);
  EXPECT_EQ(completed, kCount);
}

}  // namespace
}  // namespace sluice
