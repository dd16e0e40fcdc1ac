// Control messages out (internal): CREDIT, PING/PONG, BYE, REJECT, DECLINE, HELLO and GRANT
// leave through here (link control, the credit bank and the sender decide when), each kind
// from a buffer of its own per peer, at most one of a kind in flight; explicit credit returns.
#pragma once

#include <array>
#include <cassert>
#include <cstdint>
#include <span>

#include <sluice/engine.h>

#include "am/op.h"
#include "wire/wire.h"

namespace sluice::detail {

class EngineCore;
struct PeerData;

// A peer's control buffers: written by Control alone, read by anyone.
class ControlTo {
 public:
  bool busy(std::uint16_t kind) const { return busy_[kind]; }

 private:
  friend class Control;
  std::array<std::array<std::byte, wire::kHeaderSize + wire::kHelloSize + 128>, wire::kCtrlKinds> buf_{};
  std::array<bool, wire::kCtrlKinds> busy_{};
  bool credit_again_ = false;  // a CREDIT is due once the one in flight completes
  bool grant_again_ = false;   // a GRANT likewise, with the counts of then
};

class Control {
 public:
  explicit Control([[maybe_unused]] EngineCore& e) { assert(&engine() == &e); }
  Control(const Control&) = delete;
  Control& operator=(const Control&) = delete;

  // Sends a control message of `kind` (a CREDIT or GRANT while one is in flight is sent again
  // when it completes; any other kind is not sent twice at once).
  void send(PeerData& p, std::uint16_t kind, std::span<const std::byte> body, std::uint64_t aux = 0);
  void on_done(Op* op, absl::StatusCode code);
  // Returns owed credits in a CREDIT message once enough are due (the test inline, in
  // engine_core.h: every released message asks).
  void maybe_return_credits(PeerData& p);
  // A CREDIT message with what is owed now (that test passed, or a timer tick found some owed).
  void return_credits(PeerData& p);
  // A GRANT with both sides' loan counts: the credit bank's (what we lent the peer, its
  // target) and the sender's (what we gave back of its loan, our messages waiting for credits).
  void send_grant(PeerData& p);
  // Control messages handed to the transport and not completed.
  std::size_t inflight() const { return inflight_; }

 private:
  EngineCore& engine() const;  // the engine holding this (EngineCore::of)
  std::size_t inflight_ = 0;
};

}  // namespace sluice::detail
