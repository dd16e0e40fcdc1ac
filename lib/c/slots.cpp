// The C API's registered send memory. An slc_mem_t* is a send slot's descriptor taken out of
// its Slot, so getting a slot allocates no handle; each send lends it back to a Slot.
#include "c/c_api.h"
#include "mem/pool.h"

namespace sluice::capi {
namespace {

using detail::SlotAccess;
using detail::SlotDesc;

slc_mem_t* mem_of(SlotDesc* d) { return reinterpret_cast<slc_mem_t*>(d); }
SlotDesc* desc_of(const slc_mem_t* m) { return reinterpret_cast<SlotDesc*>(const_cast<slc_mem_t*>(m)); }

// A Slot over a handle's descriptor for one call; the handle owns it again afterwards.
class LentSlot {
 public:
  explicit LentSlot(const slc_mem_t* m) : slot_(SlotAccess::make(desc_of(m))) {}
  ~LentSlot() { (void)SlotAccess::take(slot_); }
  LentSlot(const LentSlot&) = delete;
  LentSlot& operator=(const LentSlot&) = delete;
  const Slot& slot() const { return slot_; }

 private:
  Slot slot_;
};

std::int32_t get_slot(Engine* e, std::size_t size, slc_mem_t** out) {
  Slot slot;
  Result r = e->try_get_send_slot(size, &slot);
  if (r != Result::kOk) return from_result(r, "slc_engine_try_get_send_slot");
  *out = mem_of(SlotAccess::take(slot));
  return SLC_OK;
}

std::int32_t send_mem(Peer* p, std::uint16_t handler, const slc_mem_t* mem, std::size_t length,
                      const slc_send_params_t* params) {
  SendArgs a;
  if (std::int32_t s = send_args(params, SLC_SEND_FLAG_IMMEDIATE, "slc_send_mem", &a); s != SLC_OK) return s;
  if ((a.flags & SLC_SEND_FLAG_IMMEDIATE) && !p->can_send_now()) return would_wait("slc_send_mem");
  LentSlot lent(mem);
  return from_result(p->send(handler, a.header, lent.slot(), length, std::move(a.done)), "slc_send_mem");
}

std::int32_t reply_mem(Message* m, const slc_mem_t* mem, std::size_t length, const slc_send_params_t* params) {
  SendArgs a;
  if (std::int32_t s = send_args(params, 0, "slc_msg_reply_mem", &a); s != SLC_OK) return s;
  LentSlot lent(mem);
  return from_result(m->reply(a.header, lent.slot(), length, std::move(a.done)), "slc_msg_reply_mem");
}

}  // namespace
}  // namespace sluice::capi

using namespace sluice;
using namespace sluice::capi;

extern "C" {

int32_t slc_engine_try_get_send_slot(slc_engine_t* engine, size_t size, slc_mem_t** out) {
  if (out != nullptr) *out = nullptr;
  if (engine == nullptr || out == nullptr) [[unlikely]]
    return fail(SLC_ERR_INVALID, "slc_engine_try_get_send_slot: NULL engine or out");
  return guarded([&]() -> std::int32_t { return get_slot(engine_of(engine), size, out); });
}

void* slc_mem_data(const slc_mem_t* mem, size_t* size) {
  std::byte* data = nullptr;
  std::size_t capacity = 0;
  if (mem != nullptr) {
    LentSlot lent(mem);
    data = lent.slot().data();
    capacity = lent.slot().size();
  }
  if (size != nullptr) *size = capacity;
  return data;
}

void slc_mem_release(slc_mem_t* mem) {
  guarded([&]() -> std::int32_t {
    if (mem != nullptr) SlotAccess::make(desc_of(mem)).release();
    return SLC_OK;
  });
}

int32_t slc_send_mem(slc_peer_t* peer, uint16_t handler, const slc_mem_t* payload, size_t length,
                     const slc_send_params_t* params) {
  if (peer == nullptr || payload == nullptr) [[unlikely]]
    return fail(SLC_ERR_INVALID, "slc_send_mem: NULL peer or slot");
  return guarded([&]() -> std::int32_t { return send_mem(peer_of(peer), handler, payload, length, params); });
}

int32_t slc_msg_reply_mem(slc_msg_t* request, const slc_mem_t* payload, size_t length,
                          const slc_send_params_t* params) {
  Message* m = message_of(request);
  if (m == nullptr || payload == nullptr) [[unlikely]]
    return fail(SLC_ERR_INVALID, "slc_msg_reply_mem: NULL or foreign request, or NULL slot");
  return guarded([&]() -> std::int32_t { return reply_mem(m, payload, length, params); });
}

}  // extern "C"
