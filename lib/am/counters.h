// The engine's counters (internal): pointers into its Stats, resolved once at construction
// (lifecycle.cpp names each; docs/stats.md says what each counts).
#pragma once

#include <cstdint>

#include <sluice/engine.h>
#include <sluice/stats.h>

#include "core/log.h"

namespace sluice::detail {

// One peer's share of the engine's traffic counters, for live stats' busiest peers.
struct PeerTraffic {
  std::uint64_t msgs_sent = 0, bytes_sent = 0, msgs_received = 0, bytes_received = 0;
  std::uint64_t credit_stalls = 0;
  Duration rtt{0};                                    // smoothed round trip (heartbeats, one call in 64); 0: none yet
  std::uint32_t sampler = 0;                          // counts calls, to time one in 64
  std::uint64_t msgs_at_line = 0, bytes_at_line = 0;  // both ways, at the last live-stats line
  void sample_rtt(Duration d) { rtt = rtt.count() == 0 ? d : (rtt * 7 + d) / 8; }
};

struct EngineCounters {
  Counter* msgs_sent;
  Counter* bytes_sent;
  Counter* msgs_received;
  Counter* bytes_received;
  Counter* rndv_sent;
  Counter* rndv_received;
  Counter* bounce_bytes;
  Counter* credit_stalls;
  Counter* would_block;
  Counter* parse_errors;
  Counter* duplicates;
  Counter* dropped_dead;
  Counter* unknown_handler;
  Counter* handler_errors;
  Counter* peers_failed;
  Counter* ctrl_sent;
  Counter* ctrl_received;
  Counter* credit_msgs;
  Counter* heartbeats;
  Counter* rpc_calls;
  Counter* rpc_replies;
  Counter* rpc_late_replies;
  Counter* rpc_slot_refused;
  Counter* rpc_deadline;
  Counter* rpc_cancelled;
  HighWater* queue_hwm;
  Counter* orphaned_sends;
  Counter* coalesced;
  Counter* sent_inline;
  Counter* peers_reused;
  Counter* copied_bytes;
  Counter* sink_returned;
  Counter* landing_waits;
  Counter* credits_recovered;
  Counter* invalid_argument;
  Counter* rpc_overdue;
  Counter* messages_outlived;
  Counter* unclaimed_dropped;

  // The traffic counters and a peer's share of them (live stats), counted together.
  void sent(PeerTraffic& peer, std::uint64_t msgs, std::uint64_t bytes) {
    msgs_sent->add(msgs);
    bytes_sent->add(bytes);
    peer.msgs_sent += msgs;
    peer.bytes_sent += bytes;
  }
  void received(PeerTraffic& peer, std::uint64_t msgs, std::uint64_t bytes) {
    msgs_received->add(msgs);
    bytes_received->add(bytes);
    peer.msgs_received += msgs;
    peer.bytes_received += bytes;
  }
  // A message dropped (from a dead peer, before the handshake, ...): counted and logged.
  void dropped(const char* what) {
    dropped_dead->add();
    SLUICE_LOG_RATE_LIMITED(kInfo, "am", "dropped a message: %s", what);
  }
  void credit_stall(PeerTraffic& peer) {
    credit_stalls->add();
    ++peer.credit_stalls;
  }
};

}  // namespace sluice::detail
