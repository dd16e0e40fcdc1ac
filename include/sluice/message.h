// sluice/message.h — a received active message (or RPC request/reply).
//
// A handler receives a Message& on the engine thread. Its header() and payload() are views
// into receive memory that stays valid while the Message lives, with no alignment promised
// (they follow the wire header, the payload the user header: read values with memcpy). The
// handler may move the Message somewhere and finish with it later; the receive slot, and the
// credit that lets the sender send again, return when the Message is released (destroyed or
// release()d).
//
// Ownership rules:
// - Release every Message before its engine is destroyed, on its engine's thread. (One
//   released on another thread while its engine lives is handed to the engine thread through
//   Engine::post(), so its credit and slot still come back, a little later.) One still held
//   when its engine is destroyed becomes invalid: its views are empty, its calls return
//   kInvalidArgument, and destroying it later (on any thread) touches nothing of the engine;
//   the engine counts and logs such Messages when it goes.
// - A request (is_request()) must be answered once: with reply() (zero copy), reply_copy(),
//   reply_with_payload() or reply_error(); a request released without an answer is answered
//   with Internal ("released the request without a reply") for the caller.
// - Its methods are called on its engine's thread (engine.h); from another they return
//   kInvalidArgument (logged).
//
// ABI: Message is a public class whose state (`s_`, detail::MessageState) sits inline, so its
// size and layout are compiled into every program that holds one. Not ABI-stable before 1.0:
// they may change in any release, so rebuild against each release (docs/getting-started.md).
// Rely only on the public members below, never on sizeof(Message) or detail::.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>

#include <absl/functional/any_invocable.h>
#include <sluice/api.h>
#include <sluice/pool.h>
#include <sluice/status.h>

namespace sluice {

class Peer;
class Message;

namespace detail {
class EngineCore;
struct MessageAccess;

// What a Message knows of its engine (internal): the engine while it lives; once the engine
// is gone, only how many Messages still point here. The last of them frees it.
struct MessageAnchor {
  EngineCore* core;
  std::atomic<std::size_t> held{0};  // Messages attached to the engine now
};

// A received message's state (internal), moved whole.
struct MessageState {
  MessageAnchor* anchor = nullptr;  // set while the Message holds anything of an engine
  std::uint32_t peer = 0;
  int source = -1;
  std::uint64_t epoch = 0;  // its peer's epoch when it arrived (its credit is stale after a restart)
  std::uint16_t handler = 0;
  bool request = false;
  bool replied = false;
  bool credit = false;  // releasing returns a credit to the sender
  bool reply_buf = false;
  bool in_window = false;     // a request counted in the server's RPC window
  bool reply_flag = false;    // this is a reply
  bool borrowed = false;      // views receive memory the engine holds while the handler runs;
                              // a move makes the bytes its own: it takes over `lender` when
                              // there is one (a tagged message that held only this message),
                              // else copies them (one of a coalesced tagged message's)
  bool sink_landing = false;  // payload is a handler's sink buffer no handler has seen
  std::uint16_t status = 0;
  std::uint64_t rpc_id = 0;
  std::uint64_t reply_capacity = 0;  // request with a caller-posted reply buffer
  std::uint64_t seq = 0;
  std::int64_t timed_since = 0;  // a timed request: when its handler got it (steady clock, ns)
  std::size_t announced = 0;     // payload length announced by a rendezvous header
  Slot* lender = nullptr;
  Slot slot;                          // the eager slot holding the wire message
  Slot landing;                       // rendezvous landing slot from the receive pool
  std::unique_ptr<std::byte[]> heap;  // a kept message's copy when no receive slot was free
  std::span<const std::byte> header;
  std::span<std::byte> payload;
};
}  // namespace detail

using HandlerId = std::uint16_t;
// Completion of a send or a zero-copy reply: OK, or why it failed (Unavailable: the peer is
// gone; Cancelled: the engine closed first). Runs once, on the engine thread, from progress().
using SendCallback = absl::AnyInvocable<void(absl::Status)>;

class SLUICE_API Message {
 public:
  Message() = default;
  Message(Message&& other) noexcept : s_(std::exchange(other.s_, {})) {
    if (s_.borrowed) [[unlikely]]
      own_bytes();
  }
  Message& operator=(Message&& other) noexcept;
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;
  ~Message() {
    if (s_.anchor != nullptr) release();
  }

  // False for an empty or released Message, and for one whose engine is gone (its views are
  // empty then: the memory they viewed went with the engine).
  bool valid() const { return s_.anchor != nullptr && s_.anchor->core != nullptr; }
  // The sender: its rank in rank mode, its Peer::id() in client/server mode.
  int source() const { return s_.source; }
  Peer* peer() const;
  HandlerId handler() const { return s_.handler; }
  std::span<const std::byte> header() const { return valid() ? s_.header : std::span<const std::byte>(); }
  std::span<std::byte> payload() const { return valid() ? s_.payload : std::span<std::byte>(); }
  bool is_request() const { return s_.request; }

  // Answering a request (once). As with Peer::send and send_copy, the name says who owns the
  // payload: reply() and reply_with_payload() send from the caller's memory (zero copy: it is
  // the application's again when on_done runs), reply_copy() copies it (free on return).
  // Every variant returns kOk, kUnavailable (the caller is gone) or kInvalidArgument (not a
  // request, answered already, a header above kMaxUserHeader, a payload above
  // SLUICE_MAX_MESSAGE, an invalid Message, a thread that does not drive the engine; the
  // reason is logged); never kWouldBlock: the server's RPC window bounds how
  // many replies to a client exist, and what they need is held back per client (docs/rpc.md).
  // (Bounce mode, SLUICE_RNDV=n, is the exception: a large reply's pieces go through send-pool
  // slots and may meet kWouldBlock.) The request's place in the RPC window is free for the
  // caller's next request as soon as the reply is handed over.
  //
  // Zero copy: `payload` must stay valid and unchanged until on_done runs (the contract of
  // Peer::send). Up to the eager limit it is packed with the reply's header; above it, it goes
  // by rendezvous straight from this memory, into the caller's reply_buffer when the call gave
  // one. on_done runs once when kOk was returned, never otherwise; it is required (an empty
  // one is allowed), so that no call without it can look like reply_copy().
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
  // Answers a request with an error status (code and message reach the caller).
  Result reply_error(const absl::Status& status);

  // Releases the receive memory and returns the credit now.
  void release();

 private:
  friend class detail::EngineCore;
  friend struct detail::MessageAccess;  // the engine's components (internal)
  void own_bytes();
  detail::EngineCore* answering(const char* what) const;
  detail::MessageState s_;
};

}  // namespace sluice
