// Delivery (internal): what a posted receive took, from its bytes to its handler. Parsing and
// checking, coalesced messages, messages before their sender's HELLO, in-order delivery (the
// reorder window), handing each to its handler, the RPC client (replies) or server (requests)
// or the landings (rendezvous, fragments), and the Message's release, which owes its credit
// back. It owns each peer's receive part (ReceiveState) and writes it alone.
#pragma once

#include <cassert>
#include <cstdint>
#include <span>
#include <utility>

#include <sluice/engine.h>

#include "am/op.h"
#include "am/peer_data.h"
#include "wire/wire.h"

namespace sluice::detail {

class EngineCore;

class Delivery {
 public:
  explicit Delivery([[maybe_unused]] EngineCore& e) { assert(&engine() == &e); }
  Delivery(const Delivery&) = delete;
  Delivery& operator=(const Delivery&) = delete;

  // A posted receive completed (every received message passes here).
  void on_rx(Op* op, absl::StatusCode code, std::size_t length, std::uint64_t tag);
  // A CTRL-class message taken from UCX's unexpected queue (Receives).
  void accept_contact(std::span<std::byte> bytes, std::uint64_t tag);
  // Delivers what the reorder window holds that is next in order.
  void deliver(PeerData& p);
  // A message in order, its payload here: to the RPC client, the RPC server or its handler.
  void finish_incoming(PeerData& p, Message& m);
  // A borrowed Message being moved (kept beyond its handler): takes over its lender's slot,
  // or copies its user header and payload into a receive slot of its own (the heap when
  // none is free).
  void own_bytes(Message& m);
  // Message::release(): on another thread it is handed to the engine's; a sink buffer goes
  // back, an unanswered request is answered, the credit is owed back.
  void release(Message& m);
  // A released Message's credit goes back to its peer (unless the peer failed or restarted
  // since it arrived).
  void return_credit(PeerData& p, std::uint64_t epoch);
  // Logs a peer all of whose credits the application's unreleased messages hold, once per
  // stretch that lasts SLUICE_HEARTBEAT (each timer tick).
  void watch_held(PeerData& p, Clock::time_point now);

  // The receive part's writers for the other components: a Message's credit is owed back now
  // (credit_freed) or never (credit_gone, its peer failing); the credits owed, taken to ride
  // on a message; what we grant at our HELLO; a restarted peer starting over; held messages
  // dropped (no HELLO came for them, or the peer failed).
  static void credit_freed(PeerData& p) {
    --p.rx.unreleased_;
    p.rx.owed_.released();
  }
  static void credit_gone(PeerData& p) { --p.rx.unreleased_; }
  static std::uint16_t take_owed(ReceiveState& rx) { return rx.owed_.take(); }
  static void grant_receiving(PeerData& p, std::uint32_t credits) {
    p.rx.granted_ = credits;
    p.rx.owed_.grant(credits);
  }
  static void restart_receiving(PeerData& p) {
    p.rx.owed_ = CreditReturn();
    p.rx.unreleased_ = 0;
    p.rx.window_ = ReorderWindow<Incoming>();
  }
  static void drop_held(PeerData& p) { p.rx.window_.clear(); }
  // A failed peer's grant, taken (its receive slots go back to the pool).
  static std::uint32_t take_grant(PeerData& p) { return std::exchange(p.rx.granted_, 0); }

 private:
  // One received tagged message, lying in `lender` (or nullptr: bytes no Message may take
  // over): checks it and takes its message(s). `ctrl_only`: it came with a CTRL-class tag,
  // which carries nothing but control messages.
  void parse_and_accept(std::span<std::byte> bytes, Slot* lender, std::uint64_t tag, bool ctrl_only = false);
  // Takes one received message: `bytes` (wire header first). The Message borrows them from
  // the caller, which keeps them until the Message is released or moved. `lender` is the
  // slot they lie in when they are its only message (a Message moved takes it over), or
  // nullptr (one of a coalesced tagged message's messages: a move copies them). Inline, in
  // delivery.cpp: every received message passes here.
  void accept(PeerData* p, Slot* lender, std::span<std::byte> bytes, const wire::Header& h);
  void accept_coalesced(PeerData* p, std::span<const std::byte> bytes);
  // An in-order message to its handler, the RPC server or client, or process() (inline).
  void hand_over(PeerData& p, Message& m, const wire::Header& h);
  // A message from a peer not ready: true when it is taken (its HELLO came meanwhile, or it
  // waits for it: *early), false when dropped (counted).
  bool admit_unready(PeerData& p, bool* early);
  // A message not next in order (or while an ordered rendezvous lands): the reorder window
  // keeps it, or it is dropped as a duplicate; then what is deliverable is delivered.
  void hold_or_drop(PeerData& p, Message&& m, const wire::Header& h, std::uint64_t seq);
  void process(PeerData& p, Message& m, const wire::Header& h);
  // Releases a plain message its handler neither kept nor released, on the engine thread
  // right after the handler: it owns nothing but the borrow; its credit is returned.
  void release_handled(PeerData& p, Message& m);

  // A Message comes to hold something of this engine / lets go of it (MessageAnchor::held).
  void attach(Message& m);
  void detach(Message& m);
  EngineCore& engine() const;  // the engine holding this (EngineCore::of)
};

}  // namespace sluice::detail
