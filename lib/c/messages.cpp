// The C API's handlers and messages: registration, accessors, keeping and releasing.
#include <new>

#include "c/c_api.h"

namespace sluice::capi {

void deliver(slc_handler_fn fn, Message& m, void* user_data) {
  CallbackScope scope;
  slc_msg msg{&m, kBorrowedMsg};
  fn(&msg, user_data);
  // The handle dies here: a callback that wants the message longer took it (slc_msg_keep).
  msg.kind = 0;
}

namespace {

// A message as a sink or sink-release callback sees it (read-only, for the call).
const slc_msg_t* announcement(const Message& m, slc_msg* storage) {
  *storage = slc_msg{const_cast<Message*>(&m), kBorrowedMsg};
  return storage;
}

std::int32_t register_handler(slc_engine_t* engine, std::uint16_t id, slc_handler_fn fn, void* user_data,
                              const slc_handler_params_t* params) {
  if (engine == nullptr || fn == nullptr) return fail(SLC_ERR_INVALID, "slc_engine_register: NULL engine or fn");
  if (std::int32_t s = not_in_callback("slc_engine_register: not inside a callback"); s != SLC_OK) return s;
  HandlerOptions options;
  if (params != nullptr) {
    constexpr std::uint64_t kKnown =
        SLC_HANDLER_PARAM_SINK | SLC_HANDLER_PARAM_SINK_RELEASE | SLC_HANDLER_PARAM_UNORDERED;
    if (std::int32_t s = check_mask(params->field_mask, kKnown, "slc_engine_register"); s != SLC_OK) return s;
    if ((params->field_mask & SLC_HANDLER_PARAM_UNORDERED) && params->unordered != 0) options.unordered = true;
    slc_sink_fn sink = (params->field_mask & SLC_HANDLER_PARAM_SINK) ? params->sink : nullptr;
    slc_sink_release_fn back = (params->field_mask & SLC_HANDLER_PARAM_SINK_RELEASE) ? params->sink_release : nullptr;
    if (back != nullptr && sink == nullptr)
      return fail(SLC_ERR_INVALID, "slc_engine_register: sink_release without a sink");
    if (sink != nullptr) {
      options.sink = [sink, user_data](const Message& m, std::size_t size) -> std::span<std::byte> {
        CallbackScope scope;
        slc_msg storage;
        void* buffer = sink(announcement(m, &storage), size, user_data);
        return buffer == nullptr ? std::span<std::byte>() : std::span(static_cast<std::byte*>(buffer), size);
      };
    }
    if (back != nullptr) {
      options.sink_release = [back, user_data](const Message& m, std::span<std::byte> buffer) {
        CallbackScope scope;
        slc_msg storage;
        back(announcement(m, &storage), buffer.data(), buffer.size(), user_data);
      };
    }
  }
  auto status = engine_of(engine)->register_handler(
      id, [fn, user_data](Message& m) { deliver(fn, m, user_data); }, std::move(options));
  return from_status(status);
}

}  // namespace
}  // namespace sluice::capi

using namespace sluice;
using namespace sluice::capi;

extern "C" {

int32_t slc_engine_register(slc_engine_t* engine, uint16_t id, slc_handler_fn fn, void* user_data,
                            const slc_handler_params_t* params) {
  return guarded([&]() -> std::int32_t { return register_handler(engine, id, fn, user_data, params); });
}

int32_t slc_engine_unregister(slc_engine_t* engine, uint16_t id) {
  return guarded([&]() -> std::int32_t {
    if (engine == nullptr) return fail(SLC_ERR_INVALID, "slc_engine_unregister: engine is NULL");
    if (std::int32_t s = not_in_callback("slc_engine_unregister: not inside a callback"); s != SLC_OK) return s;
    return from_status(engine_of(engine)->unregister_handler(id));
  });
}

int32_t slc_msg_source(const slc_msg_t* msg) {
  const Message* m = message_of(msg);
  return m == nullptr || !m->valid() ? -1 : m->source();
}

uint16_t slc_msg_handler(const slc_msg_t* msg) {
  const Message* m = message_of(msg);
  return m == nullptr ? 0 : m->handler();
}

int32_t slc_msg_is_request(const slc_msg_t* msg) {
  const Message* m = message_of(msg);
  return m != nullptr && m->valid() && m->is_request() ? 1 : 0;
}

const void* slc_msg_header(const slc_msg_t* msg, size_t* size) {
  const Message* m = message_of(msg);
  std::span<const std::byte> h = m == nullptr ? std::span<const std::byte>() : m->header();
  if (size != nullptr) *size = h.size();
  return h.empty() ? nullptr : h.data();
}

void* slc_msg_payload(const slc_msg_t* msg, size_t* size) {
  const Message* m = message_of(msg);
  std::span<std::byte> p = m == nullptr ? std::span<std::byte>() : m->payload();
  if (size != nullptr) *size = p.size();
  return p.empty() ? nullptr : p.data();
}

int32_t slc_msg_keep(slc_msg_t* msg, slc_msg_t** kept) {
  return guarded([&]() -> std::int32_t {
    if (kept == nullptr) return fail(SLC_ERR_INVALID, "slc_msg_keep: kept is NULL");
    *kept = nullptr;
    Message* m = message_of(msg);
    if (m == nullptr || !m->valid()) return fail(SLC_ERR_INVALID, "slc_msg_keep: NULL, released or foreign message");
    if (msg->kind == kKeptMsg) {
      *kept = msg;  // kept already: the same handle
      return SLC_OK;
    }
    auto* k = new (std::nothrow) KeptMsg{};
    if (k == nullptr) return fail(SLC_ERR_NO_MEMORY, "slc_msg_keep: out of memory");
    k->own = std::move(*m);
    k->m = &k->own;
    k->kind = kKeptMsg;
    *kept = k;
    return SLC_OK;
  });
}

void slc_msg_release(slc_msg_t* msg) {
  guarded([&]() -> std::int32_t {
    Message* m = message_of(msg);
    if (m == nullptr) return SLC_OK;
    if (msg->kind == kKeptMsg) {
      msg->kind = 0;
      delete static_cast<KeptMsg*>(msg);
    } else {
      m->release();
    }
    return SLC_OK;
  });
}

}  // extern "C"
