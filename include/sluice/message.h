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

  // Answers a request. kInvalidArgument when this is not a request or was answered already;
  // kUnavailable when the caller is gone; kWouldBlock when the send pool is exhausted (retry
  // after progressing). The request's slot stays busy until the reply's send has completed.
  Result reply(std::span<const std::byte> header, std::span<const std::byte> payload);
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
  bool holds_rpc_slot_ = false;       // a request that took one of the server's slots
  bool reply_flag_ = false;           // this is a reply
  std::uint16_t status_ = 0;
  std::uint64_t seq_ = 0;
  std::size_t announced_ = 0;         // payload length announced by a rendezvous header
  bool borrowed_ = false;             // views receive memory the engine holds while the
                                      // handler runs; moving the Message makes the bytes its
                                      // own: it takes over `lender_` when there is one (a
                                      // tagged message that held only this message), else
                                      // copies them (one of a coalesced tagged message's)
  Slot* lender_ = nullptr;
  Slot slot_;                          // the eager slot holding the wire message
  Slot landing_;                       // rendezvous landing slot from the receive pool
  std::unique_ptr<std::byte[]> heap_;  // rendezvous landing beyond the largest class
  std::span<const std::byte> header_;
  std::span<std::byte> payload_;
};

}  // namespace sluice
