// sluice/status.h — how Sluice reports errors.
//
// Control paths (creating contexts and engines, connecting, registering handlers, parsing
// configuration) return absl::Status or absl::StatusOr<T>. The message says what to change.
//
// Hot paths (posting a send, taking a pool slot) return the small Result enum below: it never
// allocates and is cheap to test. Every hot-path function documents which Results it returns
// and the retry rule for kWouldBlock ("progress the engine, then retry").
//
// Completions (of sends, calls, transfers) carry an absl::Status. The codes Sluice uses:
//   OK, InvalidArgument (API misuse, bad sizes), ResourceExhausted (pool or slot table full),
//   DeadlineExceeded, Unavailable (peer dead or closed), Cancelled, Unimplemented (unknown
//   handler or method), Internal (a remote handler threw), DataLoss (corrupt wire data),
//   FailedPrecondition (wrong state, e.g. engine shut down).
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

namespace sluice {

// Result of a hot-path call. Never allocates.
enum class [[nodiscard]] Result : int{
    kOk = 0,            // done, or accepted: completion will be reported
    kWouldBlock,        // no resource now: progress the engine, then retry
    kExhausted,         // a bounded resource is full and will not free by progressing alone
    kInvalidArgument,   // the call itself is wrong (size, id, state)
    kUnavailable,       // the peer is dead or closed
    kDeadlineExceeded,  // the caller's deadline passed
};

const char* to_string(Result r);

// Converts a hot-path Result into a Status with `what` as context.
absl::Status to_status(Result r, std::string_view what);

}  // namespace sluice

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define SLUICE_RETURN_IF_ERROR(expr)                                                 \
  do {                                                                               \
    if (::absl::Status sluice_status_ = (expr); !sluice_status_.ok()) [[unlikely]] { \
      return sluice_status_;                                                         \
    }                                                                                \
  } while (0)

#define SLUICE_STATUS_CONCAT_INNER(a, b) a##b
#define SLUICE_STATUS_CONCAT(a, b) SLUICE_STATUS_CONCAT_INNER(a, b)

// `SLUICE_ASSIGN_OR_RETURN(auto x, f());` assigns the value of a StatusOr, or returns its
// status from the enclosing function.
#define SLUICE_ASSIGN_OR_RETURN(lhs, expr) \
  SLUICE_ASSIGN_OR_RETURN_IMPL(SLUICE_STATUS_CONCAT(sluice_or_, __LINE__), lhs, expr)
#define SLUICE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) [[unlikely]] {                      \
    return std::move(tmp).status();                  \
  }                                                  \
  lhs = std::move(tmp).value()
