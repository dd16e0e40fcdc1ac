// A call of this engine's, outstanding (internal): the reply callback, the deadline, and what
// a call with a reply buffer needs besides.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>

#include <sluice/engine.h>

#include "am/op.h"

namespace sluice::detail {

// What only a call with a reply buffer needs: its reply header and its payload land in either
// order, and a call cancelled meanwhile completes once its receive is cancelled. Allocated for
// those calls alone, so that every other call() neither builds nor destroys a Message and a
// Status (measured: the client's reply path was where RPC cost most beyond a plain message).
struct ReplyLanding {
  std::span<std::byte> buffer;  // the caller's (CallOptions::reply_buffer)
  bool payload_landed = false;
  std::size_t payload_len = 0;
  bool header_arrived = false;
  Message reply;              // reply header (waiting for the payload to land)
  absl::Status final_status;  // finishing: what the call completes with
};

struct Call {
  Call(std::uint32_t to, ReplyCallback&& cb, Clock::time_point due, Clock::time_point warn, HandlerId m)
      : peer(to), on_reply(std::move(cb)), deadline(due), warn_at(warn), method(m) {}

  std::uint32_t peer;
  ReplyCallback on_reply;
  Clock::time_point deadline;
  Clock::time_point warn_at;  // a call without a timeout: when it is logged as overdue (SLUICE_CALL_WARN)
  HandlerId method = 0;
  Clock::time_point started{};            // timed calls only (MethodCounters, PeerTraffic::rtt)
  Op* reply_rx = nullptr;                 // posted exact receive for the reply payload
  bool finishing = false;                 // cancelled or expired, waiting for reply_rx to be cancelled
  std::unique_ptr<ReplyLanding> landing;  // calls with a reply buffer only
};

}  // namespace sluice::detail
