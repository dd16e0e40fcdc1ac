// Live counters: triggers and destination (SLUICE_STATS_TRIGGER, SLUICE_STATS_DEST).
#include "am/live_stats.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <mutex>

#include <absl/strings/str_format.h>

#include "core/log.h"

namespace sluice::detail {
namespace {

// Signals received, per signal we handle: the handler only counts (async-signal-safe).
std::atomic<std::uint64_t> g_usr1{0}, g_usr2{0};
std::atomic<std::uint64_t>& count_of(int sig) { return sig == SIGUSR1 ? g_usr1 : g_usr2; }
extern "C" void on_stats_signal(int sig) { count_of(sig).fetch_add(1, std::memory_order_relaxed); }

void install_once(int sig) {
  static std::once_flag usr1, usr2;
  std::call_once(sig == SIGUSR1 ? usr1 : usr2, [sig] {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0) return;
    if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) {
      SLUICE_LOG(kWarn, "stats",
                 "SLUICE_STATS_TRIGGER=signal:%s: the process already handles or ignores %s; "
                 "not installed, so that signal writes no stats",
                 sig == SIGUSR1 ? "USR1" : "USR2", strsignal(sig));
      return;
    }
    struct sigaction sa {};
    sa.sa_handler = on_stats_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(sig, &sa, nullptr);
  });
}

// file:PATH with %p (pid), %h (host name) and %% expanded.
std::string expand_path(std::string_view pattern) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    char c = pattern[++i];
    if (c == 'p') out += std::to_string(::getpid());
    else if (c == 'h') out += host_name();
    else if (c == '%') out += '%';
    else out += {'%', c};
  }
  return out;
}

}  // namespace

const std::string& host_name() {
  static const std::string kName = [] {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0) return std::string("unknown");
    return std::string(buf);
  }();
  return kName;
}

std::string utc_timestamp() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  std::tm tm{};
  ::gmtime_r(&ts.tv_sec, &tm);
  return absl::StrFormat("%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                         tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ts.tv_nsec / 1000000));
}

std::string json_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out;
}

LiveStats::LiveStats(const StatsTrigger& trigger, std::string dest, Clock::time_point now)
    : trigger_(trigger), dest_(std::move(dest)) {
  if (trigger_.signal != 0) {
    install_once(trigger_.signal);
    signals_seen_ = count_of(trigger_.signal).load(std::memory_order_relaxed);
  }
  if (trigger_.every.count() != 0) next_ = now + trigger_.every;
}

LiveStats::~LiveStats() {
  if (fd_ > 2) ::close(fd_);
}

const char* LiveStats::due(Clock::time_point now) {
  if (trigger_.signal != 0) {
    std::uint64_t n = count_of(trigger_.signal).load(std::memory_order_relaxed);
    if (n != signals_seen_) {
      signals_seen_ = n;
      return "signal";
    }
  }
  if (now >= next_) {
    // The next one a whole period on: a late tick does not make a burst of lines.
    next_ = std::max(next_ + trigger_.every, now);
    return "timer";
  }
  return nullptr;
}

void LiveStats::write(std::string_view line) {
  if (fd_ < 0) {  // the first line: open the destination
    fd_ = 2;
    if (dest_.rfind("file:", 0) == 0) {
      std::string path = expand_path(std::string_view(dest_).substr(5));
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd >= 0) {
        fd_ = fd;
      } else {
        SLUICE_LOG(kWarn, "stats", "SLUICE_STATS_DEST=%s: cannot open %s (%s); stats lines go to stderr", dest_, path,
                   std::strerror(errno));
      }
    }
  }
  std::string out(line);
  out += '\n';
  // One write per line: O_APPEND keeps several engines' and processes' lines whole.
  std::size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::write(fd_, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace sluice::detail
