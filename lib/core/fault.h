// Named fault points (internal; docs/reliability.md). SLUICE_FAULT_AT=NAME[:N] makes the
// process end the N-th time (default 1) it reaches point NAME: _exit, no goodbye, no cleanup,
// as a crash there would. The fault tests run one peer armed and check that the others see
// every operation complete once. One point fails an operation instead: pool-grow makes every
// pool growth from the N-th on fail as a failed mmap would (memory that ran out stays out).
// Compiled into the tests' library only (libsluice-testing, SLUICE_FAULT_POINTS=1); the
// installed libsluice accepts the variable and ignores it, with a warning.
#pragma once

#include <cstdint>
#include <string_view>

#include <absl/status/statusor.h>

// Set by meson per library: 1 for libsluice-testing, 0 for libsluice.
#ifndef SLUICE_FAULT_POINTS
#define SLUICE_FAULT_POINTS 0
#endif

namespace sluice::detail {

enum class FaultPoint : std::uint8_t {
  kNone,
  kHello,         // before our HELLO to a peer is sent (the handshake)
  kRndvAnnounce,  // before a rendezvous announcement is posted (sender)
  kRndvPayload,   // after a rendezvous payload's send is posted, before it is pulled (sender)
  kRndvLand,      // after the exact receive for an announced payload is posted (receiver)
  kCreditReturn,  // before an explicit credit return is sent (receiver)
  kPoolGrow,      // a pool class maps another chunk (fails instead of ending the process)
};

struct FaultSpec {
  FaultPoint point = FaultPoint::kNone;
  std::uint64_t nth = 1;
};

// "" -> no fault; "NAME" or "NAME:N" with NAME one of hello, rndv-announce, rndv-payload,
// rndv-land, credit-return, pool-grow and N >= 1.
absl::StatusOr<FaultSpec> parse_fault_at(std::string_view s);
const char* fault_point_name(FaultPoint p);
constexpr bool kFaultPointsBuilt = SLUICE_FAULT_POINTS != 0;

class FaultTrigger {
 public:
  void arm(FaultSpec s) {
    point_ = s.point;
    left_ = s.nth;
  }
  // Ends the process when this is the armed point's N-th pass.
  void pass(FaultPoint p) {
    if constexpr (kFaultPointsBuilt) {
      if (point_ == p && --left_ == 0) [[unlikely]]
        die(p);
    }
  }
  // For a point that fails an operation (pool-grow): true on the armed point's N-th pass and
  // every one after it.
  bool fails(FaultPoint p) {
    if constexpr (kFaultPointsBuilt) {
      if (point_ != p) return false;
      if (left_ > 1) {
        --left_;
        return false;
      }
      left_ = 0;
      return true;
    }
    return false;
  }

 private:
  [[noreturn]] static void die(FaultPoint p);
  FaultPoint point_ = FaultPoint::kNone;
  std::uint64_t left_ = 0;
};

}  // namespace sluice::detail
