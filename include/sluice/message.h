// sluice/message.h — a received active message (or RPC request/reply).
//
// A handler receives a Message& on the engine thread. Its header() and payload() are views
// into receive memory that stays valid while the Message lives. The handler may move the
// Message somewhere and finish with it later; the receive slot, and the credit that lets the
// sender send again, return when the Message is released (destroyed or release()d).
//
// Ownership rules:
// - Release every Message before its engine is destroyed, on its engine's thread. (One
//   released on another thread is handed to the engine thread through Engine::post(), so
//   its credit and slot still come back, a little later.)
// - A request (is_request()) must be answered once with reply() or reply_error(); a request
//   released without an answer is answered with an Internal error for the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include <sluice/pool.h>
#include <sluice/status.h>

namespace sluice {

namespace detail {
class EngineCore;
}
class Peer;

using HandlerId = std::uint16_t;
// Completion of a send or a zero-copy reply: OK, or why it failed (Unavailable: the peer is
// gone; Cancelled: the engine closed first). Runs once, on the engine thread, from progress().
using SendCallback = std::function<void(absl::Status)>;

class Message {
 public:
  Message() = default;
  Message(Message&& other) noexcept;
  Message& operator=(Message&& other) noexcept;
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;
  ~Message() {
    if (engine_ != nullptr || slot_ || landing_ || heap_) release();
  }

  bool valid() const { return engine_ != nullptr; }
  // The sender: its rank in rank mode, its Peer::id() in client/server mode.
  int source() const { return source_; }
  Peer* peer() const;
  HandlerId handler() const { return handler_; }
  std::span<const std::byte> header() const { return header_; }
  std::span<std::byte> payload() const { return payload_; }
  bool is_request() const { return request_; }

  // Answering a request (once). Every variant returns kOk, kUnavailable (the caller is gone)
  // or kInvalidArgument (not a request, answered already, a header above kMaxUserHeader or a
  // payload above SLUICE_MAX_MESSAGE); never kWouldBlock: the server's slot table bounds how
  // many replies to a client exist, and what they need is held back per client (docs/rpc.md).
  // (Bounce mode, SLUICE_RNDV=n, is the exception: a large reply's pieces go through send-pool
  // slots and may meet kWouldBlock.) The request's RPC slot is free for the caller's next
  // request as soon as the reply is handed over.
  //
  // Zero copy: `payload` must stay valid and unchanged until on_done runs (the contract of
  // Peer::send). Up to the eager limit it is packed with the reply's header; above it, it goes
  // by rendezvous straight from this memory, into the caller's reply_buffer when the call gave
  // one. on_done runs once when kOk was returned, never otherwise.
  Result reply(std::span<const std::byte> header, std::span<const std::byte> payload, SendCallback on_done);
  // Zero copy from the first `length` bytes of a registered send-pool slot
  // (Engine::try_get_send_slot), with its memory handle: the slot must stay alive and
  // unchanged until on_done runs.
  Result reply(std::span<const std::byte> header, const Slot& payload, std::size_t length, SendCallback on_done);
  // Zero copy from this request's own payload (an echo, a forward, a read-modify-write: the
  // handler may change payload() in place first): the request's receive memory is held until
  // the reply's send completes, and this Message is released by the call unless it returns
  // kInvalidArgument (valid() is false afterwards; the sender's credit returns once the memory
  // is free).
  Result reply_with_payload(std::span<const std::byte> header, SendCallback on_done = {});
  // Copies a payload above the eager limit first (into a send-pool slot, or the heap when the
  // pool's class is exhausted or too small): the caller's buffer is free when this returns.
  // Counted in am.copied_bytes.
  Result reply_copy(std::span<const std::byte> header, std::span<const std::byte> payload);
  // reply_copy(), under its earlier name.
  Result reply(std::span<const std::byte> header, std::span<const std::byte> payload) {
    return reply_copy(header, payload);
  }
  // Answers a request with an error status (code and message reach the caller).
  Result reply_error(const absl::Status& status);

  // Releases the receive memory and returns the credit now.
  void release();

 private:
  friend class detail::EngineCore;
  detail::EngineCore* engine_ = nullptr;
  std::uint32_t peer_ = 0;
  int source_ = -1;
  std::uint64_t incarnation_ = 0;
  HandlerId handler_ = 0;
  bool request_ = false;
  bool replied_ = false;
  bool credit_ = false;  // releasing returns a credit to the sender
  std::uint64_t rpc_id_ = 0;
  std::uint64_t reply_capacity_ = 0;  // request with a caller-posted reply buffer
  bool reply_buf_ = false;
  bool holds_rpc_slot_ = false;  // a request that took one of the server's slots
  bool reply_flag_ = false;      // this is a reply
  std::uint16_t status_ = 0;
  std::uint64_t seq_ = 0;
  std::size_t announced_ = 0;  // payload length announced by a rendezvous header
  bool borrowed_ = false;      // views receive memory the engine holds while the
                               // handler runs; moving the Message makes the bytes its
                               // own: it takes over `lender_` when there is one (a
                               // tagged message that held only this message), else
                               // copies them (one of a coalesced tagged message's)
  Slot* lender_ = nullptr;
  bool sink_landing_ = false;          // payload_ is a handler's sink buffer no handler has seen
  Slot slot_;                          // the eager slot holding the wire message
  Slot landing_;                       // rendezvous landing slot from the receive pool
  std::unique_ptr<std::byte[]> heap_;  // a kept message's copy when no receive slot was free
  std::span<const std::byte> header_;
  std::span<std::byte> payload_;
};

}  // namespace sluice
