// The RPC server (internal): requests from peers and their replies. It owns each peer's server
// part (the window granted to it as a client, RequestWindow), checks every request against it,
// runs the method's handler, and sends replies: inline, eager, by rendezvous into the caller's
// reply buffer, or from the request's own memory.
#pragma once

#include <cassert>
#include <span>

#include <sluice/engine.h>

#include "am/handlers.h"
#include "am/op.h"
#include "flow/flow.h"

namespace sluice::detail {

class EngineCore;
struct PeerData;

// A peer's server part: RpcServer's alone.
class RequestsFrom {
 public:
  // Requests it may have unanswered (what is admitted; a lower window takes effect once the
  // peer keeps to it).
  std::uint32_t capacity() const { return window_.capacity(); }

 private:
  friend class RpcServer;
  RequestWindow window_;
};

class RpcServer {
 public:
  explicit RpcServer([[maybe_unused]] EngineCore& e) { assert(&engine() == &e); }
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;

  // The window granted to the peer (our HELLO), or the default for a new or failed peer; a
  // new capacity for the requests it has (a loan, or a lower window it keeps to).
  void grant(PeerData& p, std::uint32_t window);
  void resize(PeerData& p, std::uint32_t window);
  void on_request(PeerData& p, Message& m);
  Result reply(Message& m, std::span<const std::byte> header, std::span<const std::byte> payload, std::uint16_t status,
               PayloadCopy copy = PayloadCopy::kPoolOrHeap, SendCallback&& on_done = {}, void* memh = nullptr,
               Op** last_out = nullptr);
  // A reply with a status and a text for payload, copied (errors the engine answers itself).
  void answer_error(Message& m, absl::StatusCode code, std::string_view text);
  // reply() from the request's own payload: the request's memory rides with the reply's last
  // operation (Op::pending) until it completes.
  Result reply_own(Message& m, std::span<const std::byte> header, SendCallback&& on_done);
  // A reply's send completed (or failed): its send slot held back for replies is free.
  void reply_sent(PeerData& p);

 private:
  // on_request()'s uncommon ends, out of line: a request beyond the window, refused; one whose
  // handler is not registered (kNoHandler) or threw (kThrew), answered with an error.
  void refuse(PeerData& p, Message& m);
  void not_done(Message& m, Handlers::Invoke done);
  // kInvalidArgument, logged: `m` is not a request, or was answered already.
  Result not_answerable(const Message& m);
  // The reply to `m` is handed over: its place in the window is free for the caller's next
  // request (`sent`: its send completed already; otherwise it is counted until it does).
  // `status`: the reply's (0 OK), for the method's counters.
  void answered(PeerData& p, Message& m, bool sent, std::uint16_t status);
  // A reply whose payload does not fit the caller's reply buffer: OutOfRange, saying so (out
  // of line: the text's string stays off the reply's path).
  Result reply_too_large(Message& m, std::size_t payload, SendCallback&& on_done, Op** last_out);
  // kInvalidArgument, logged: a reply's header or payload beyond its bound.
  Result too_large(const Message& m, const PeerData& p, std::size_t header, std::size_t payload);
  // reply() once its checks passed and no reply buffer takes the payload: inline, or packed.
  Result send_reply(PeerData& p, Message& m, std::uint8_t flags, std::span<const std::byte> header,
                    std::span<const std::byte> payload, std::uint16_t status, PayloadCopy copy, SendCallback&& on_done,
                    void* memh, Op** last_out);
  // reply_own() of a payload that leaves by rendezvous or into the caller's reply buffer: the
  // request's memory is held until the reply's last operation completes.
  Result reply_own_held(Message& m, std::span<const std::byte> header, SendCallback&& on_done);
  Result reply_into_buffer(PeerData& p, Message& m, std::span<const std::byte> header,
                           std::span<const std::byte> payload, PayloadCopy copy, SendCallback&& on_done, void* memh,
                           Op** last_out);

  EngineCore& engine() const;  // the engine holding this (EngineCore::of)
};

}  // namespace sluice::detail
