#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/log.h"

namespace sluice::detail {
namespace {

TEST(RateLimit, AllowsOneLinePerIntervalAndCountsTheRest) {
  RateLimit limit(std::chrono::milliseconds(200));
  std::uint64_t suppressed = 99;
  EXPECT_TRUE(limit.allow(&suppressed));
  EXPECT_EQ(suppressed, 0u);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(limit.allow(&suppressed));
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  EXPECT_TRUE(limit.allow(&suppressed));
  EXPECT_EQ(suppressed, 5u);
}

TEST(Log, LevelFiltersMessages) {
  set_log_level(LogLevel::kWarn);
  EXPECT_TRUE(log_enabled(LogLevel::kError));
  EXPECT_TRUE(log_enabled(LogLevel::kWarn));
  EXPECT_FALSE(log_enabled(LogLevel::kInfo));
  set_log_level(LogLevel::kTrace);
  EXPECT_TRUE(log_enabled(LogLevel::kDebug));
  set_log_level(LogLevel::kWarn);
}

}  // namespace
}  // namespace sluice::detail
