// The C API's sends, calls and replies over Peer::send/call and Message::reply.
#include <string>

#include "c/c_api.h"

namespace sluice::capi {
namespace {

constexpr std::uint64_t kSendKnown = SLC_SEND_PARAM_HEADER | SLC_SEND_PARAM_CALLBACK | SLC_SEND_PARAM_FLAGS;
constexpr std::uint64_t kCallKnown =
    SLC_CALL_PARAM_HEADER | SLC_CALL_PARAM_TIMEOUT | SLC_CALL_PARAM_REPLY_BUFFER | SLC_CALL_PARAM_FLAGS;

// A send's or reply's completion as a C callback (empty without one).
SendCallback completion(const slc_send_params_t& params) {
  if (!(params.field_mask & SLC_SEND_PARAM_CALLBACK) || params.callback == nullptr) return {};
  return [cb = params.callback, user_data = params.user_data](const absl::Status& status) {
    CallbackScope scope;
    cb(status.ok() ? SLC_OK : from_status(status), user_data);
  };
}

// The header of a params struct, or an error for NULL with a length.
bool header_of(std::uint64_t mask, std::uint64_t bit, const void* header, std::size_t size,
               std::span<const std::byte>* out) {
  if (!(mask & bit)) return true;
  if (header == nullptr && size != 0) return false;
  *out = bytes(header, size);
  return true;
}

}  // namespace

std::int32_t send_args(const slc_send_params_t* params, std::uint32_t allowed, const char* what, SendArgs* out) {
  if (params == nullptr) return SLC_OK;
  if (std::int32_t s = check_mask(params->field_mask, kSendKnown, what); s != SLC_OK) return s;
  out->flags = (params->field_mask & SLC_SEND_PARAM_FLAGS) ? params->flags : 0;
  if (out->flags & ~allowed) return fail_text(SLC_ERR_INVALID, std::string(what) + ": a flag it does not take");
  if (!header_of(params->field_mask, SLC_SEND_PARAM_HEADER, params->header, params->header_size, &out->header))
    return fail_text(SLC_ERR_INVALID, std::string(what) + ": header is NULL with a nonzero size");
  out->done = completion(*params);
  return SLC_OK;
}

std::int32_t would_wait(const char* what) {
  return fail_text(SLC_ERR_WOULD_BLOCK,
                   std::string(what) + ": the message would wait (no credit, or messages queued ahead)");
}

namespace {

std::int32_t send_with(Peer* p, std::uint16_t handler, std::span<const std::byte> payload,
                       const slc_send_params_t& params) {
  SendArgs a;
  if (std::int32_t s = send_args(&params, SLC_SEND_FLAG_COPY | SLC_SEND_FLAG_IMMEDIATE, "slc_send", &a); s != SLC_OK)
    return s;
  if ((a.flags & SLC_SEND_FLAG_IMMEDIATE) && !p->can_send_now()) return would_wait("slc_send");
  Result r = (a.flags & SLC_SEND_FLAG_COPY) ? p->send_copy(handler, a.header, payload, std::move(a.done))
                                            : p->send(handler, a.header, payload, std::move(a.done));
  return from_result(r, "slc_send");
}

ReplyCallback reply_callback(slc_reply_fn fn, void* user_data) {
  return [fn, user_data](const absl::Status& status, Message& reply) {
    CallbackScope scope;
    if (!status.ok()) {
      fn(from_status(status), nullptr, user_data);
      return;
    }
    slc_msg msg{&reply, kBorrowedMsg};
    fn(SLC_OK, &msg, user_data);
    msg.kind = 0;
  };
}

std::int32_t call(Peer* p, std::uint16_t method, std::span<const std::byte> payload, const slc_call_params_t* params,
                  slc_reply_fn on_reply, void* user_data, slc_request_t** request) {
  CallOptions options;
  std::span<const std::byte> header;
  bool copy = false;
  if (params != nullptr) {
    std::uint64_t mask = params->field_mask;
    if (std::int32_t s = check_mask(mask, kCallKnown, "slc_call"); s != SLC_OK) return s;
    if (!header_of(mask, SLC_CALL_PARAM_HEADER, params->header, params->header_size, &header))
      return fail(SLC_ERR_INVALID, "slc_call: header is NULL with a nonzero size");
    if (mask & SLC_CALL_PARAM_TIMEOUT) options.timeout = to_duration(params->timeout_ns);
    if (mask & SLC_CALL_PARAM_REPLY_BUFFER) {
      if (params->reply_buffer == nullptr && params->reply_buffer_size != 0)
        return fail(SLC_ERR_INVALID, "slc_call: reply_buffer is NULL with a nonzero size");
      options.reply_buffer = std::span(static_cast<std::byte*>(params->reply_buffer), params->reply_buffer_size);
    }
    std::uint32_t flags = (mask & SLC_CALL_PARAM_FLAGS) ? params->flags : 0;
    if (flags & ~std::uint32_t{SLC_SEND_FLAG_COPY}) return fail(SLC_ERR_INVALID, "slc_call: unknown flags");
    copy = flags & SLC_SEND_FLAG_COPY;
  }
  CallId call_id = 0;
  Result r = copy ? p->call_copy(method, header, payload, options, reply_callback(on_reply, user_data), &call_id)
                  : p->call(method, header, payload, options, reply_callback(on_reply, user_data), &call_id);
  if (r == Result::kOk && request != nullptr) *request = request_of(call_id);
  return from_result(r, "slc_call");
}

std::int32_t reply(Message* m, std::span<const std::byte> payload, const slc_send_params_t* params) {
  SendArgs a;
  if (std::int32_t s = send_args(params, SLC_SEND_FLAG_COPY, "slc_msg_reply", &a); s != SLC_OK) return s;
  Result r = (a.flags & SLC_SEND_FLAG_COPY) ? m->reply_copy(a.header, payload)
                                            : m->reply(a.header, payload, std::move(a.done));
  return from_result(r, "slc_msg_reply");
}

}  // namespace
}  // namespace sluice::capi

using namespace sluice;
using namespace sluice::capi;

extern "C" {

int32_t slc_send(slc_peer_t* peer, uint16_t handler, const void* payload, size_t size,
                 const slc_send_params_t* params) {
  if (peer == nullptr || (payload == nullptr && size != 0)) [[unlikely]]
    return fail(SLC_ERR_INVALID, "slc_send: NULL peer, or NULL payload with a nonzero size");
  return guarded([&]() -> std::int32_t {
    // The common case, no parameters: straight to Peer::send.
    if (params == nullptr) [[likely]]
      return from_result(peer_of(peer)->send(handler, {}, bytes(payload, size)), "slc_send");
    return send_with(peer_of(peer), handler, bytes(payload, size), *params);
  });
}

int32_t slc_call(slc_peer_t* peer, uint16_t method, const void* payload, size_t size, const slc_call_params_t* params,
                 slc_reply_fn on_reply, void* user_data, slc_request_t** request) {
  if (peer == nullptr || on_reply == nullptr || (payload == nullptr && size != 0)) [[unlikely]]
    return fail(SLC_ERR_INVALID, "slc_call: NULL peer or on_reply, or NULL payload with a nonzero size");
  return guarded([&]() -> std::int32_t {
    return call(peer_of(peer), method, bytes(payload, size), params, on_reply, user_data, request);
  });
}

int32_t slc_engine_cancel(slc_engine_t* engine, slc_request_t* request) {
  if (engine == nullptr || request == nullptr)
    return fail(SLC_ERR_INVALID, "slc_engine_cancel: NULL engine or request");
  return guarded([&]() -> std::int32_t {
    engine_of(engine)->cancel(call_id_of(request));
    return SLC_OK;
  });
}

int32_t slc_msg_reply(slc_msg_t* request, const void* payload, size_t size, const slc_send_params_t* params) {
  Message* m = message_of(request);
  if (m == nullptr || (payload == nullptr && size != 0)) [[unlikely]]
    return fail(SLC_ERR_INVALID, "slc_msg_reply: NULL or foreign request, or NULL payload with a nonzero size");
  return guarded([&]() -> std::int32_t { return reply(m, bytes(payload, size), params); });
}

int32_t slc_msg_reply_error(slc_msg_t* request, int32_t status, const char* message, size_t length) {
  Message* m = message_of(request);
  if (m == nullptr || (message == nullptr && length != 0)) [[unlikely]]
    return fail(SLC_ERR_INVALID, "slc_msg_reply_error: NULL or foreign request, or NULL message with a length");
  if (status >= 0) return fail(SLC_ERR_INVALID, "slc_msg_reply_error: status must be an SLC_ERR_* code");
  return guarded([&]() -> std::int32_t {
    absl::Status s(absl_code(status), absl::string_view(message == nullptr ? "" : message, length));
    return from_result(m->reply_error(s), "slc_msg_reply_error");
  });
}

}  // extern "C"
