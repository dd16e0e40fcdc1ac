#include <sluice/status.h>

#include <string>

namespace sluice {

const char* to_string(Result r) {
  switch (r) {
    case Result::kOk: return "ok";
    case Result::kWouldBlock: return "would block";
    case Result::kExhausted: return "resource exhausted";
    case Result::kInvalidArgument: return "invalid argument";
    case Result::kUnavailable: return "unavailable";
    case Result::kDeadlineExceeded: return "deadline exceeded";
  }
  return "unknown result";
}

absl::Status to_status(Result r, std::string_view what) {
  std::string msg = std::string(what) + ": " + to_string(r);
  switch (r) {
    case Result::kOk: return absl::OkStatus();
    case Result::kWouldBlock:
    case Result::kExhausted: return absl::ResourceExhaustedError(msg);
    case Result::kInvalidArgument: return absl::InvalidArgumentError(msg);
    case Result::kUnavailable: return absl::UnavailableError(msg);
    case Result::kDeadlineExceeded: return absl::DeadlineExceededError(msg);
  }
  return absl::InternalError(msg);
}

}  // namespace sluice
