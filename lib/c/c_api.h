// The C API's shared pieces (internal): status conversion, the thread-local detail string,
// the exception barrier, and what the opaque handles are.
//
// Handles: slc_context_t* is a sluice::Context*, slc_engine_t* an Engine*, slc_peer_t* a
// Peer* (cast, no wrapper: no cost, no lifetime of their own). slc_msg_t is a small struct
// (below) because a message is either a callback's (borrowed, on the stack) or kept (heap).
// slc_request_t* carries a CallId in its bits (ids are never 0) and slc_mem_t* is a send
// slot's descriptor (slots.cpp): neither allocates anything per call or slot.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include <sluice/context.h>
#include <sluice/engine.h>
#include <sluice/message.h>
#include <sluice/sluice_c.h>

struct slc_msg {  // NOLINT(readability-identifier-naming): the C API's name for it
  sluice::Message* m;
  std::uint32_t kind;  // kBorrowedMsg or kKeptMsg
};

namespace sluice::capi {

inline constexpr std::uint32_t kBorrowedMsg = 0x534c4d31;  // a callback's, valid until it returns
inline constexpr std::uint32_t kKeptMsg = 0x534c4d32;      // slc_msg_keep's, owned by the handle

// A kept message: the handle and the Message it owns, freed by slc_msg_release.
struct KeptMsg : slc_msg {
  Message own;
};

// Sets this thread's detail and returns `code` (a static string: no allocation).
std::int32_t fail(std::int32_t code, const char* detail);
// Sets this thread's detail to a copy of `detail` and returns `code`.
std::int32_t fail_text(std::int32_t code, std::string_view detail);
// The SLC code of a status, its message kept as the detail when not OK.
std::int32_t from_status(const absl::Status& status);
// The SLC code of a hot-path result; the detail names `what` (C++ logged the reason).
std::int32_t from_result(Result r, const char* what);
// The SLC code of an absl code (no detail).
std::int32_t code_of(absl::StatusCode code);
// The absl code an SLC error code stands for (for reply_error).
absl::StatusCode absl_code(std::int32_t code);
// Inside catch (...): the exception as a code and detail.
std::int32_t from_exception();
// slc_init_version() succeeded in this process.
bool initialized();

// Nanoseconds as given to the C API (SLC_TIMEOUT_INFINITE or negative: none).
Duration to_duration(std::int64_t ns);
Clock::time_point deadline_after(std::int64_t ns);

// How many C callbacks this thread is inside: calls that must not run in one check it.
extern thread_local int callback_depth;
struct CallbackScope {
  CallbackScope() { ++callback_depth; }
  ~CallbackScope() { --callback_depth; }
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;
};
// SLC_ERR_INVALID naming `what` when called inside a callback, else SLC_OK.
std::int32_t not_in_callback(const char* what);

// Runs `f` (returning an int32_t status), turning any exception into a status.
template <typename F>
std::int32_t guarded(F&& f) noexcept {
  try {
    return f();
  } catch (...) {
    return from_exception();
  }
}

inline Engine* engine_of(slc_engine_t* e) { return reinterpret_cast<Engine*>(e); }
inline const Engine* engine_of(const slc_engine_t* e) { return reinterpret_cast<const Engine*>(e); }
inline Peer* peer_of(slc_peer_t* p) { return reinterpret_cast<Peer*>(p); }
inline const Peer* peer_of(const slc_peer_t* p) { return reinterpret_cast<const Peer*>(p); }
inline slc_peer_t* handle_of(Peer* p) { return reinterpret_cast<slc_peer_t*>(p); }
inline std::span<const std::byte> bytes(const void* p, std::size_t n) { return {static_cast<const std::byte*>(p), n}; }
// A C string given as pointer + length, as a view; false for NULL with a nonzero length.
inline bool text_of(const char* p, std::size_t n, std::string_view* out) {
  if (p == nullptr && n != 0) return false;
  *out = std::string_view(p == nullptr ? "" : p, n);
  return true;
}
static_assert(sizeof(slc_request_t*) >= sizeof(CallId), "a request handle carries its CallId in the pointer's bits");
inline slc_request_t* request_of(CallId id) {
  return reinterpret_cast<slc_request_t*>(static_cast<std::uintptr_t>(id));  // NOLINT(performance-no-int-to-ptr)
}
inline CallId call_id_of(const slc_request_t* r) { return reinterpret_cast<std::uintptr_t>(r); }
// The message a handle names, or nullptr for NULL, a foreign pointer's kind, or an empty one.
inline Message* message_of(const slc_msg_t* msg) {
  if (msg == nullptr || (msg->kind != kBorrowedMsg && msg->kind != kKeptMsg)) [[unlikely]]
    return nullptr;
  return msg->m;
}
// SLC_ERR_INVALID when `mask` has bits outside `known` (a newer header's fields).
std::int32_t check_mask(std::uint64_t mask, std::uint64_t known, const char* what);
// What a slc_send_params_t asks for, checked.
struct SendArgs {
  std::span<const std::byte> header;
  std::uint32_t flags = 0;
  SendCallback done;  // empty without SLC_SEND_PARAM_CALLBACK
};
// Reads `params` (NULL: none) for the call `what`, which accepts the flags `allowed`.
// SLC_OK, or SLC_ERR_INVALID naming what is wrong.
std::int32_t send_args(const slc_send_params_t* params, std::uint32_t allowed, const char* what, SendArgs* out);
// SLC_ERR_WOULD_BLOCK for SLC_SEND_FLAG_IMMEDIATE when a message to the peer would wait.
std::int32_t would_wait(const char* what);
// A message handed to a C callback for the duration of the call.
void deliver(slc_handler_fn fn, Message& m, void* user_data);

}  // namespace sluice::capi
