// An operation of the engine in the transport (internal): a common head, and what each
// kind of operation carries; the records that a send queue and the reorder window hold.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>

#include <sluice/message.h>
#include <sluice/pool.h>

#include "transport/transport.h"
#include "wire/wire.h"

namespace sluice::detail {

// A Message's state, for the engine's components (EngineCore reaches it as a friend).
struct MessageAccess {
  static MessageState& of(Message& m) { return m.s_; }
  static const MessageState& of(const Message& m) { return m.s_; }
};
inline MessageState& state(Message& m) { return MessageAccess::of(m); }
inline const MessageState& state(const Message& m) { return MessageAccess::of(m); }
// Empties a Message's state: what it owns goes back, every field to its default, in place (an
// assignment from `{}` would build a temporary, zero it and copy it in: twice the stores).
inline void clear(MessageState& s) {
  std::destroy_at(&s);
  std::construct_at(&s);
}

class EngineCore;

// Whether a rendezvous payload is copied before it leaves: not at all (the caller keeps it
// valid until completion), into a send-pool slot (kWouldBlock when its class is exhausted:
// send_copy), or into a slot or else the heap (copying replies, which must not fail).
enum class PayloadCopy : std::uint8_t { kNo, kPool, kPoolOrHeap };

enum class OpKind : std::uint8_t { kSend, kSendPayload, kCtrl, kRx, kRndvRx, kReplyRx, kContactRx };

// Messages up to this size (header included) are coalesced (SLUICE_COALESCE).
inline constexpr std::size_t kCoalesceMax = 1024;
// Messages up to this size (header included) to a ready peer with credits and an empty send
// queue leave inline, from the stack, with no pool slot and no operation: UCX's eager-short
// limit on shared memory (`ucx_info -e` prints "0..<egr/short>..93" for sysv and posix: 92
// bytes go inline, 93 do not, as measured with am.sent_inline; TCP's limit is larger).
inline constexpr std::size_t kInlineMax = 92;

// One message to send, as its parts: what every send path takes. The wire header's remaining
// fields (sequence, credits, acknowledgement) are the peer's state, filled in when it leaves.
struct Outgoing {
  std::uint8_t flags = 0;  // wire flags: REQUEST, REPLY, REPLY_BUF, RNDV, FRAG
  HandlerId handler = 0;
  std::span<const std::byte> header;   // the user header
  std::span<const std::byte> payload;  // what travels in the message itself
  std::uint64_t rpc_id = 0;            // a request's call id, or the call a reply answers
  std::uint64_t aux = 0;               // a request's reply-buffer capacity; a piece's offset
  std::uint16_t status = 0;            // a reply's status code
};

// A one-way message: no flags, no call.
inline Outgoing plain_message(HandlerId h, std::span<const std::byte> header, std::span<const std::byte> payload) {
  Outgoing m;
  m.handler = h;
  m.header = header;
  m.payload = payload;
  return m;
}

// A transport operation of this engine; pooled, never allocated on the hot path once warm.
struct Op : TransportOp {
  // The head, every kind's.
  EngineCore* engine = nullptr;
  OpKind kind = OpKind::kSend;
  std::uint32_t peer = 0;
  // The peer's epoch when the op began (its completion is stale after a restart).
  std::uint64_t epoch = 0;
  bool in_use = false;    // between new_op() and free_op()
  bool orphaned = false;  // completed by Sluice after its peer died; UCX's late callback only frees it
  Op* next_free = nullptr;
  // What the op holds while it lives, any kind.
  Slot slot;                          // packed message (sends) or receive slot (rx)
  std::unique_ptr<std::byte[]> heap;  // a copied payload larger than any class; a contact's bytes
  Message pending;                    // kRndvRx: the announcement waiting for its payload;
                                      // kSendPayload: the request whose payload it sends

  // kSend, kSendPayload, kCtrl.
  struct Send {
    const std::byte* payload = nullptr;  // rendezvous payload to send
    std::size_t payload_len = 0;
    void* payload_memh = nullptr;
    std::size_t message_len = 0;  // packed bytes in slot
    std::uint64_t tag = 0;
    SendCallback on_done;
    bool ends_reply = false;       // the last op of a reply: its completion ends the reply in flight
    std::uint16_t ctrl_kind = 0;   // kCtrl
    Op* coalesced_next = nullptr;  // sends riding in this one's tagged message
    // A queued plain eager send that later small sends may join (see append_queued()).
    bool batchable = false;
    std::uint32_t batch_count = 1;  // messages in its tagged message: the credits it takes
    std::size_t batch_last = 0;     // offset of the last message's header in `slot`
    Op* coalesced_tail = nullptr;   // the last op of the coalesced_next chain
    std::string declined;           // kSendPayload: why the receiver refused it (DECLINE)
  } send;

  // kRx, kRndvRx, kReplyRx.
  struct Receive {
    // kRx. `queued`: waiting in Receives' list to be posted; `busy`: posted, or its completion
    // not yet handled (never both).
    bool queued = false;
    bool busy = false;
    bool ordered = false;       // kRndvRx: later messages wait for this one
    bool discard = false;       // kRndvRx: takes a refused payload and drops it (no bytes)
    std::uint64_t call_id = 0;  // kReplyRx
    // kRx: the receive key it serves (0: none, an op beyond its peer's posted receives after
    // a smaller re-grant).
    std::uint64_t key = 0;
  } recv;
};

// The engine's operations, pooled: none is allocated on the hot path once the pool is warm,
// and an op's address never changes while the engine lives (a deque), so the transport may
// hold it. take() hands one out for a kind and a peer; give() resets it and takes it back.
class OpPool {
 public:
  OpPool(EngineCore* engine, TransportCallback on_complete) : engine_(engine), on_complete_(on_complete) {}
  OpPool(const OpPool&) = delete;
  OpPool& operator=(const OpPool&) = delete;

  Op* take(OpKind kind, std::uint32_t peer);
  void give(Op* op);
  // Every op ever made, in use or not (teardown, and the checks of a gone peer's index).
  std::deque<Op>::iterator begin() { return storage_.begin(); }
  std::deque<Op>::iterator end() { return storage_.end(); }
  std::deque<Op>::const_iterator begin() const { return storage_.begin(); }
  std::deque<Op>::const_iterator end() const { return storage_.end(); }

 private:
  EngineCore* engine_;
  TransportCallback on_complete_;
  std::deque<Op> storage_;
  Op* free_ = nullptr;
};

struct Completion {
  Op* op;
  absl::StatusCode code;
  std::size_t length;
  std::uint64_t tag;
};

// The completions queued for drain_completions(), in order: a vector whose push is inline
// while there is room and grows out of line (std::vector's growth, inlined into the
// transport's callback, cost it 16 instructions per message in saved registers).
class Completions {
 public:
  // The fields are written in place (no Completion built on the stack and copied).
  void push(Op* op, absl::StatusCode code, std::size_t length, std::uint64_t tag) {
    if (size_ == capacity_) [[unlikely]]
      return push_growing({op, code, length, tag});
    Completion& c = items_[size_++];
    c.op = op;
    c.code = code;
    c.length = length;
    c.tag = tag;
  }
  void push_back(const Completion& c) { push(c.op, c.code, c.length, c.tag); }
  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }
  const Completion& operator[](std::size_t i) const { return items_[i]; }
  const Completion& back() const { return items_[size_ - 1]; }
  void pop_back() { --size_; }
  void clear() { size_ = 0; }

 private:
  void push_growing(const Completion& c);  // op.cpp
  std::unique_ptr<Completion[]> items_;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

// A message waiting for credits (or for the handshake) in a peer's send queue.
struct Pending {
  Op* header;   // packed eager message or rendezvous announcement
  Op* payload;  // rendezvous payload, or nullptr
};

// A received message with its decoded header, waiting for its turn in sequence order.
struct Incoming {
  Message message;
  wire::Header header;
};

}  // namespace sluice::detail
