#include "core/fault.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <ctime>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

namespace sluice::detail {
namespace {

constexpr FaultPoint kPoints[] = {FaultPoint::kHello,    FaultPoint::kRndvAnnounce, FaultPoint::kRndvPayload,
                                  FaultPoint::kRndvLand, FaultPoint::kCreditReturn, FaultPoint::kPoolGrow};

}  // namespace

const char* fault_point_name(FaultPoint p) {
  switch (p) {
    case FaultPoint::kNone: return "none";
    case FaultPoint::kHello: return "hello";
    case FaultPoint::kRndvAnnounce: return "rndv-announce";
    case FaultPoint::kRndvPayload: return "rndv-payload";
    case FaultPoint::kRndvLand: return "rndv-land";
    case FaultPoint::kCreditReturn: return "credit-return";
    case FaultPoint::kPoolGrow: return "pool-grow";
  }
  return "?";
}

absl::StatusOr<FaultSpec> parse_fault_at(std::string_view s) {
  FaultSpec spec;
  if (s.empty()) return spec;
  std::string_view name = s.substr(0, s.find(':'));
  for (FaultPoint p : kPoints) {
    if (name == fault_point_name(p)) spec.point = p;
  }
  if (spec.point == FaultPoint::kNone) {
    std::string known;
    for (FaultPoint p : kPoints) absl::StrAppend(&known, known.empty() ? "" : ", ", fault_point_name(p));
    return absl::InvalidArgumentError(absl::StrFormat("unknown fault point '%s' (%s)", name, known));
  }
  if (name.size() < s.size()) {
    std::string_view n = s.substr(name.size() + 1);
    auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), spec.nth);
    if (ec != std::errc() || end != n.data() + n.size() || spec.nth == 0) {
      return absl::InvalidArgumentError(absl::StrFormat("'%s' after the point's name is not a count of 1 or more", n));
    }
  }
  return spec;
}

void FaultTrigger::die(FaultPoint p) {
  // Nothing that allocates or locks: the point may be reached anywhere on the engine thread.
  // The wall-clock time lets a test measure how long the peers took to notice.
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  char line[160];
  int n = std::snprintf(line, sizeof(line), "sluice: fault point %s reached (SLUICE_FAULT_AT) at %lld.%06ld: exiting\n",
                        fault_point_name(p), static_cast<long long>(now.tv_sec), now.tv_nsec / 1000);
  if (n > 0) (void)!write(STDERR_FILENO, line, std::min<std::size_t>(static_cast<std::size_t>(n), sizeof(line) - 1));
  _exit(86);
}

}  // namespace sluice::detail
