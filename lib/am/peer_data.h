// What the engine knows of one peer (internal): who it is, the link and its liveness, the
// handshake, what we may send it (credits, queue, sequence), what we receive from it (posted
// receives, key, reorder window), RPC in both directions, its traffic. Every field has one
// writer, which the compiler enforces: the identity and endpoint are PeerTable's (private,
// with PeerTable as friend), each part is its component's (private, with that component as
// friend), the traffic counters are written by their own methods.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <sluice/engine.h>

#include "am/control.h"
#include "am/counters.h"
#include "am/credit_bank.h"
#include "am/landings.h"
#include "am/link_control.h"
#include "am/op.h"
#include "am/receives.h"
#include "am/rpc_client.h"
#include "am/rpc_server.h"
#include "am/sender.h"
#include "flow/flow.h"
#include "transport/transport.h"
#include "wire/wire.h"

namespace sluice::detail {

// How many peers a live stats line describes (the busiest by bytes).
inline constexpr std::size_t kStatsPeers = 8;

class EngineCore;

// A peer's receive part: written by Delivery alone, read by anyone.
class ReceiveState {
 public:
  // Credits owed back to it, piggybacked on what we send (Sender takes them: take_owed()).
  const CreditReturn& owed() const { return owed_; }
  // Receive slots reserved for its messages (its credits).
  std::uint32_t granted() const { return granted_; }
  // Its Messages alive that return a credit when released.
  std::uint32_t unreleased() const { return unreleased_; }
  const ReorderWindow<Incoming>& window() const { return window_; }

 private:
  friend class Delivery;
  CreditReturn owed_;
  std::uint32_t granted_ = 0;
  std::uint32_t unreleased_ = 0;
  ReorderWindow<Incoming> window_;
  // Since when every credit it has is held by a Message the application has not released
  // (logged once per such stretch when it lasts a heartbeat interval).
  Clock::time_point held_since_{};
  bool held_logged_ = false;
};

struct PeerData {
  // Who it is (PeerTable's). Our index for it: the index it puts in tags to us; its rank in
  // rank mode, -1 for a client/server peer; the public Peer for it.
  std::uint32_t id() const { return id_; }
  int rank() const { return rank_; }
  Peer* handle() const { return handle_.get(); }
  // In logs and statuses: "rank 3", "client 10.0.0.7:40312".
  const std::string& name() const { return name_; }
  // Its index for us: the index we put in tags to it.
  std::uint32_t remote_index() const { return remote_index_; }
  // How we reach it (made and replaced by PeerTable alone; used by everyone).
  Endpoint& ep() { return ep_; }
  const Endpoint& ep() const { return ep_; }

  // The handshake, the link's liveness, the goodbye (LinkControl's).
  LinkState link;

  // What we send it: credits, sequence, the send queue (Sender's).
  SendsTo tx;
  // Control messages to it (Control's).
  ControlTo ctrl;

  // What we receive from it: credits owed back, ordering (Delivery's).
  ReceiveState rx;
  // The credits we lent it and want back (CreditBank's).
  LoanState loan;
  // Receives posted for its EAGER tag (exact, keyed): Receives'.
  PostedFor posted;

  // RPC both ways: our calls to it (RpcClient's), its calls to us (RpcServer's).
  CallsTo calls;
  RequestsFrom requests;
  // Its large payloads arriving (Landings').
  LandingsFrom landings;

  // Its share of the traffic counters (written by its own methods).
  PeerTraffic traffic;

  // Its link's state and epoch (LinkControl's).
  PeerState state() const { return link.state(); }
  std::uint64_t epoch() const { return link.epoch(); }

  // Messages or calls wait to be sent (for credits, the RPC window or the handshake).
  bool has_waiting() const { return tx.waiting() || calls.waiting(); }
  // A message may leave at once: the handshake is done, a credit is free, nothing queued
  // ahead of it.
  bool can_send_now() const { return state() == PeerState::kReady && !tx.waiting() && tx.credits().available() != 0; }

 private:
  friend class PeerTable;  // the writer of these
  std::uint32_t id_ = 0;
  int rank_ = -1;
  std::unique_ptr<Peer> handle_;
  std::string name_;
  std::uint32_t remote_index_ = 0;
  Endpoint ep_;
};

}  // namespace sluice::detail
