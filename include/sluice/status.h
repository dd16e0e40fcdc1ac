// sluice/status.h — how Sluice reports errors: the one place each result is defined.
//
// Control paths (creating contexts and engines, connecting, registering handlers, parsing
// configuration) return absl::Status or absl::StatusOr<T>; hot paths (sends, calls, replies,
// taking a pool slot) return the Result enum below, which never allocates. Completions (of
// sends, calls, transfers) carry an absl::Status. Every public function's comment lists what
// it returns and when; each value means the same everywhere:
//
//   Result / absl code          meaning                                         what to do
//   kOk / OK                    done, or accepted: its completion will run      -
//   kWouldBlock                 no room now (send queue, send pool, calls       progress the engine,
//                               outstanding); frees as the engine progresses    then retry
//   kInvalidArgument /          the call itself is wrong: a size, an id, a      fix the caller; the
//     InvalidArgument           state (a Message answered already), or the      reason is logged
//                               wrong thread; nothing was done                  (rate-limited)
//   kUnavailable / Unavailable  the peer is dead, closed or unreachable         drop or reconnect
//   kDeadlineExceeded /         a deadline passed (a call's timeout, a          -
//     DeadlineExceeded          connect)
//   Cancelled                   Engine::cancel(), or the engine closing         -
//   ResourceExhausted           a server refused a call beyond the RPC window   -
//                               it granted; a peer's credits cannot be reserved
//   Unimplemented               no handler or method is registered (names it)  -
//   Internal                    a remote handler threw, or released a request   -
//                               without answering (says which)
//   OutOfRange                  a reply larger than the call's reply_buffer     -
//                               (names both sizes)
//   PermissionDenied            the front door's keys do not match             -
//   FailedPrecondition          wrong state (already listening, ...)           -
//   DataLoss                    corrupt wire data                               -
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <sluice/api.h>

namespace sluice {

// Result of a hot-path call (see the table above). Never allocates.
enum class [[nodiscard]] Result : int{
    kOk = 0, kWouldBlock, kInvalidArgument, kUnavailable, kDeadlineExceeded,
};

SLUICE_API const char* to_string(Result r);

// Converts a hot-path Result into a Status with `what` as context.
SLUICE_API absl::Status to_status(Result r, std::string_view what);

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
