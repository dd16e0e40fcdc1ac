#include "core/log.h"

#include <unistd.h>

#include <cstdio>
#include <string>

namespace sluice::detail {

std::atomic<int> g_log_level{static_cast<int>(LogLevel::kWarn)};
namespace {
std::atomic<int> g_log_rank{-1};

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
    case LogLevel::kTrace: return "trace";
  }
  return "?";
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void set_log_level(LogLevel level) { g_log_level.store(static_cast<int>(level), std::memory_order_relaxed); }

void set_log_rank(int rank) { g_log_rank.store(rank, std::memory_order_relaxed); }

void log_write(LogLevel level, const char* module, std::string_view message) {
  std::string line;
  int rank = g_log_rank.load(std::memory_order_relaxed);
  if (rank >= 0) {
    line = absl::StrFormat("sluice[%d:%d] %s %s: %s\n", rank, getpid(), level_name(level), module, message);
  } else {
    line = absl::StrFormat("sluice[%d] %s %s: %s\n", getpid(), level_name(level), module, message);
  }
  // One write so lines from several threads and processes do not interleave.
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

bool RateLimit::allow(std::uint64_t* suppressed) {
  std::int64_t now = now_ns();
  std::int64_t next = next_ns_.load(std::memory_order_relaxed);
  if (now >= next && next_ns_.compare_exchange_strong(next, now + interval_ns_)) {
    *suppressed = suppressed_.exchange(0, std::memory_order_relaxed);
    return true;
  }
  suppressed_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

}  // namespace sluice::detail
