// The C API's versions, status codes and detail strings; the exception barrier.
#include <atomic>
#include <cinttypes>
#include <new>
#include <string>

#include <sluice/version.h>

#include "c/c_api.h"

namespace sluice::capi {
namespace {

// The detail of this thread's last failure: a static string or an owned copy.
thread_local const char* detail_static = "";
thread_local std::string detail_owned;
thread_local bool detail_is_owned = false;
std::atomic<bool> init_done{false};

}  // namespace

thread_local int callback_depth = 0;

std::int32_t fail(std::int32_t code, const char* detail) {
  detail_static = detail;
  detail_is_owned = false;
  return code;
}

std::int32_t fail_text(std::int32_t code, std::string_view detail) {
  detail_owned.assign(detail);
  detail_is_owned = true;
  return code;
}

std::int32_t code_of(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return SLC_OK;
    case absl::StatusCode::kInvalidArgument: return SLC_ERR_INVALID;
    case absl::StatusCode::kUnavailable: return SLC_ERR_UNAVAILABLE;
    case absl::StatusCode::kDeadlineExceeded: return SLC_ERR_DEADLINE;
    case absl::StatusCode::kCancelled: return SLC_ERR_CANCELLED;
    case absl::StatusCode::kResourceExhausted: return SLC_ERR_REFUSED;
    case absl::StatusCode::kUnimplemented: return SLC_ERR_UNIMPLEMENTED;
    case absl::StatusCode::kInternal: return SLC_ERR_INTERNAL;
    case absl::StatusCode::kOutOfRange: return SLC_ERR_OUT_OF_RANGE;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated: return SLC_ERR_PERMISSION;
    case absl::StatusCode::kFailedPrecondition: return SLC_ERR_PRECONDITION;
    case absl::StatusCode::kDataLoss: return SLC_ERR_DATA_LOSS;
    case absl::StatusCode::kNotFound: return SLC_ERR_NOT_FOUND;
    case absl::StatusCode::kAlreadyExists: return SLC_ERR_ALREADY_EXISTS;
    default: return SLC_ERR_UNKNOWN;
  }
}

absl::StatusCode absl_code(std::int32_t code) {
  switch (code) {
    case SLC_ERR_INVALID: return absl::StatusCode::kInvalidArgument;
    case SLC_ERR_UNAVAILABLE: return absl::StatusCode::kUnavailable;
    case SLC_ERR_DEADLINE: return absl::StatusCode::kDeadlineExceeded;
    case SLC_ERR_CANCELLED: return absl::StatusCode::kCancelled;
    case SLC_ERR_WOULD_BLOCK:
    case SLC_ERR_NO_MEMORY:
    case SLC_ERR_REFUSED: return absl::StatusCode::kResourceExhausted;
    case SLC_ERR_UNIMPLEMENTED: return absl::StatusCode::kUnimplemented;
    case SLC_ERR_INTERNAL: return absl::StatusCode::kInternal;
    case SLC_ERR_OUT_OF_RANGE: return absl::StatusCode::kOutOfRange;
    case SLC_ERR_PERMISSION: return absl::StatusCode::kPermissionDenied;
    case SLC_ERR_VERSION:
    case SLC_ERR_NOT_INITIALIZED:
    case SLC_ERR_PRECONDITION: return absl::StatusCode::kFailedPrecondition;
    case SLC_ERR_DATA_LOSS: return absl::StatusCode::kDataLoss;
    case SLC_ERR_NOT_FOUND: return absl::StatusCode::kNotFound;
    case SLC_ERR_ALREADY_EXISTS: return absl::StatusCode::kAlreadyExists;
    default: return absl::StatusCode::kUnknown;
  }
}

std::int32_t from_status(const absl::Status& status) {
  if (status.ok()) return SLC_OK;
  return fail_text(code_of(status.code()), status.ToString());
}

std::int32_t from_result(Result r, const char* what) {
  switch (r) {
    case Result::kOk: return SLC_OK;
    case Result::kWouldBlock: return fail(SLC_ERR_WOULD_BLOCK, what);
    case Result::kInvalidArgument: return fail(SLC_ERR_INVALID, what);
    case Result::kUnavailable: return fail(SLC_ERR_UNAVAILABLE, what);
    case Result::kDeadlineExceeded: return fail(SLC_ERR_DEADLINE, what);
  }
  return fail(SLC_ERR_UNKNOWN, what);
}

std::int32_t from_exception() {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return fail(SLC_ERR_NO_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail_text(SLC_ERR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(SLC_ERR_INTERNAL, "internal error: unknown exception");
  }
}

bool initialized() { return init_done.load(std::memory_order_acquire); }

Duration to_duration(std::int64_t ns) { return ns < 0 ? kInfinite : Duration(ns); }

Clock::time_point deadline_after(std::int64_t ns) {
  if (ns < 0) return Clock::time_point::max();
  Clock::time_point now = Clock::now();
  // A timeout too large for the clock is no deadline.
  if (Duration(ns) > Clock::time_point::max() - now) return Clock::time_point::max();
  return now + Duration(ns);
}

std::int32_t not_in_callback(const char* what) {
  if (callback_depth > 0) [[unlikely]]
    return fail(SLC_ERR_INVALID, what);
  return SLC_OK;
}

std::int32_t check_mask(std::uint64_t mask, std::uint64_t known, const char* what) {
  if ((mask & ~known) == 0) [[likely]]
    return SLC_OK;
  char text[160];
  std::snprintf(text, sizeof text, "%s: field_mask bits 0x%" PRIx64 " are unknown to this library (C API %d.%d)", what,
                mask & ~known, SLC_API_VERSION_MAJOR, SLC_API_VERSION_MINOR);
  return fail_text(SLC_ERR_INVALID, text);
}

}  // namespace sluice::capi

using namespace sluice::capi;

extern "C" {

int32_t slc_init_version(uint32_t major, uint32_t minor) {
  if (major != SLC_API_VERSION_MAJOR || minor > SLC_API_VERSION_MINOR) {
    char text[160];
    std::snprintf(text, sizeof text, "the program wants Sluice C API %u.%u, this library implements %d.%d", major,
                  minor, SLC_API_VERSION_MAJOR, SLC_API_VERSION_MINOR);
    return guarded([&]() -> std::int32_t { return fail_text(SLC_ERR_VERSION, text); });
  }
  init_done.store(true, std::memory_order_release);
  return SLC_OK;
}

void slc_get_version(uint32_t* api_major, uint32_t* api_minor, uint32_t* release_major, uint32_t* release_minor,
                     uint32_t* release_patch) {
  if (api_major != nullptr) *api_major = SLC_API_VERSION_MAJOR;
  if (api_minor != nullptr) *api_minor = SLC_API_VERSION_MINOR;
  if (release_major != nullptr) *release_major = SLUICE_VERSION_MAJOR;
  if (release_minor != nullptr) *release_minor = SLUICE_VERSION_MINOR;
  if (release_patch != nullptr) *release_patch = SLUICE_VERSION_PATCH;
}

const char* slc_strerror(int32_t status) {
  switch (status) {
    case SLC_OK: return "SLC_OK: success";
    case SLC_IN_PROGRESS: return "SLC_IN_PROGRESS: accepted, its completion reports the outcome";
    case SLC_ERR_WOULD_BLOCK: return "SLC_ERR_WOULD_BLOCK: no room now, progress the engine and retry";
    case SLC_ERR_INVALID: return "SLC_ERR_INVALID: invalid argument, state or thread";
    case SLC_ERR_UNAVAILABLE: return "SLC_ERR_UNAVAILABLE: the peer failed, closed or cannot be reached";
    case SLC_ERR_DEADLINE: return "SLC_ERR_DEADLINE: the deadline passed";
    case SLC_ERR_CANCELLED: return "SLC_ERR_CANCELLED: cancelled, or the engine closed";
    case SLC_ERR_REFUSED: return "SLC_ERR_REFUSED: refused for lack of resources (RPC window, credits)";
    case SLC_ERR_UNIMPLEMENTED: return "SLC_ERR_UNIMPLEMENTED: no such handler or method";
    case SLC_ERR_INTERNAL: return "SLC_ERR_INTERNAL: internal error";
    case SLC_ERR_OUT_OF_RANGE: return "SLC_ERR_OUT_OF_RANGE: larger than the buffer given";
    case SLC_ERR_PERMISSION: return "SLC_ERR_PERMISSION: permission denied";
    case SLC_ERR_PRECONDITION: return "SLC_ERR_PRECONDITION: wrong state for this call";
    case SLC_ERR_DATA_LOSS: return "SLC_ERR_DATA_LOSS: corrupt data";
    case SLC_ERR_NO_MEMORY: return "SLC_ERR_NO_MEMORY: out of memory";
    case SLC_ERR_VERSION: return "SLC_ERR_VERSION: the library is older than the program's header";
    case SLC_ERR_NOT_FOUND: return "SLC_ERR_NOT_FOUND: not found";
    case SLC_ERR_ALREADY_EXISTS: return "SLC_ERR_ALREADY_EXISTS: already exists";
    case SLC_ERR_NOT_INITIALIZED: return "SLC_ERR_NOT_INITIALIZED: call slc_init() first";
    case SLC_ERR_UNKNOWN: return "SLC_ERR_UNKNOWN: unknown error";
    default: return "unknown Sluice status code";
  }
}

const char* slc_last_error(void) { return detail_is_owned ? detail_owned.c_str() : detail_static; }

}  // extern "C"
