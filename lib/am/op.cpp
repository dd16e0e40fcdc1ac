// The operation pool (op.h).
#include "am/op.h"

#include <algorithm>

namespace sluice::detail {

void Completions::push_growing(const Completion& c) {
  std::size_t capacity = capacity_ == 0 ? 64 : 2 * capacity_;
  std::unique_ptr<Completion[]> items(new Completion[capacity]);
  std::copy(items_.get(), items_.get() + size_, items.get());
  items_ = std::move(items);
  capacity_ = capacity;
  items_[size_++] = c;
}

Op* OpPool::take(OpKind kind, std::uint32_t peer) {
  Op* op = free_;
  if (op != nullptr) [[likely]] {
    free_ = op->next_free;
  } else {
    op = &storage_.emplace_back();
    op->engine = engine_;
    op->on_complete = on_complete_;
  }
  op->kind = kind;
  op->peer = peer;
  op->in_use = true;
  return op;
}

void OpPool::give(Op* op) {
  if (op->pending.valid()) [[unlikely]]
    op->pending = Message();  // a request replied from (reply_own)
  op->slot.release();
  op->heap.reset();
  op->send.on_done = nullptr;
  op->send.payload = nullptr;
  op->send.payload_len = 0;
  op->send.payload_memh = nullptr;
  op->send.ends_reply = false;
  op->recv.call_id = 0;
  op->recv.discard = false;
  op->send.declined.clear();
  op->send.tag = 0;
  op->orphaned = false;
  op->send.batchable = false;
  op->send.batch_count = 1;
  op->send.batch_last = 0;
  op->send.coalesced_tail = nullptr;
  op->request = nullptr;
  op->in_use = false;
  op->next_free = free_;
  free_ = op;
}

}  // namespace sluice::detail
