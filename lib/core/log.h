// Logging (internal): levels, per-module categories, rate limiting.
//
//   SLUICE_LOG(kWarn, "mem", "recv pool exhausted, %u/%u slots", used, total);
//   SLUICE_LOG_RATE_LIMITED(kWarn, "flow", "peer %d: ...", rank);  // at most 1 line/s/site
//
// Lines go to stderr as "sluice[<rank>:<pid>] <level> <module>: <message>". Messages are
// lowercase and name the object and numbers that identify it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>

#include <absl/strings/str_format.h>
#include <sluice/config.h>

namespace sluice::detail {

extern std::atomic<int> g_log_level;

void set_log_level(LogLevel level);
void set_log_rank(int rank);
void log_write(LogLevel level, const char* module, std::string_view message);

inline bool log_enabled(LogLevel level) {
  return static_cast<int>(level) <= g_log_level.load(std::memory_order_relaxed);
}

// Allows one event per interval; counts what it suppressed so the next line can say so.
class RateLimit {
 public:
  explicit RateLimit(std::chrono::milliseconds interval = std::chrono::seconds(1))
      : interval_ns_(std::chrono::nanoseconds(interval).count()) {}
  // True when a line may be written now; `suppressed` gets the count dropped since the last.
  bool allow(std::uint64_t* suppressed);

 private:
  std::int64_t interval_ns_;
  std::atomic<std::int64_t> next_ns_{0};
  std::atomic<std::uint64_t> suppressed_{0};
};

}  // namespace sluice::detail

#define SLUICE_LOG(level, module, ...)                                                                \
  do {                                                                                                \
    if (::sluice::detail::log_enabled(::sluice::LogLevel::level)) [[unlikely]] {                      \
      ::sluice::detail::log_write(::sluice::LogLevel::level, module, ::absl::StrFormat(__VA_ARGS__)); \
    }                                                                                                 \
  } while (0)

#define SLUICE_LOG_RATE_LIMITED(level, module, ...)                                                     \
  do {                                                                                                  \
    if (::sluice::detail::log_enabled(::sluice::LogLevel::level)) [[unlikely]] {                        \
      static ::sluice::detail::RateLimit sluice_rate_limit_;                                            \
      std::uint64_t sluice_suppressed_ = 0;                                                             \
      if (sluice_rate_limit_.allow(&sluice_suppressed_)) {                                              \
        std::string sluice_line_ = ::absl::StrFormat(__VA_ARGS__);                                      \
        if (sluice_suppressed_ != 0)                                                                    \
          ::absl::StrAppendFormat(&sluice_line_, " (%u similar lines suppressed)", sluice_suppressed_); \
        ::sluice::detail::log_write(::sluice::LogLevel::level, module, sluice_line_);                   \
      }                                                                                                 \
    }                                                                                                   \
  } while (0)
