// UCX status conversion and UCX facts, shared by both transports (transport.h).
#include <ucp/api/ucp.h>

#include <absl/strings/str_format.h>

#include "transport/transport.h"
#include "transport/ucx.h"

namespace sluice::detail {

absl::StatusCode ucx_status_code(int s) {
  switch (static_cast<ucs_status_t>(s)) {
    case UCS_OK: return absl::StatusCode::kOk;
    case UCS_ERR_CANCELED: return absl::StatusCode::kCancelled;
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_ENDPOINT_TIMEOUT: return absl::StatusCode::kDeadlineExceeded;
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT: return absl::StatusCode::kResourceExhausted;
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR: return absl::StatusCode::kInvalidArgument;
    case UCS_ERR_MESSAGE_TRUNCATED: return absl::StatusCode::kOutOfRange;
    case UCS_ERR_UNSUPPORTED: return absl::StatusCode::kUnimplemented;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_NO_DEVICE:
    case UCS_ERR_BUSY: return absl::StatusCode::kUnavailable;
    default: return absl::StatusCode::kInternal;
  }
}

const char* ucx_status_name(int s) { return ucs_status_string(static_cast<ucs_status_t>(s)); }

const char* transport_error_name(int s) { return ucx_status_name(s); }

absl::Status ucx_status(int s, std::string_view what) {
  if (s == UCS_OK) return absl::OkStatus();
  return absl::Status(ucx_status_code(s), absl::StrFormat("%s: %s", what, ucx_status_name(s)));
}

std::uint32_t shm_fifo_size(std::uint32_t credits) {
  const std::uint64_t unconsumed = 3 * std::uint64_t{credits} + 16;
  std::uint32_t fifo = 64;  // UCX's default
  while (fifo < 2 * unconsumed && fifo < kShmFifoMax) fifo *= 2;
  return fifo;
}

std::uint32_t shm_fifo_credits(std::uint32_t fifo) { return fifo / 2 > 16 ? (fifo / 2 - 16) / 3 : 0; }

// Here, not in ucx_context.cpp: the fake transport's engines ask it too (0: no UCX FIFO).
std::uint32_t TransportContext::fifo_credits() const {
  return fifo_size_.empty() ? 0 : shm_fifo_credits(static_cast<std::uint32_t>(std::stoul(fifo_size_)));
}

std::string ucx_library_version() {
  unsigned major, minor, release;
  ucp_get_version(&major, &minor, &release);
  return absl::StrFormat("%u.%u.%u", major, minor, release);
}

}  // namespace sluice::detail
