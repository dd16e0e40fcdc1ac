// The engine's counters (internal): pointers into its Stats, resolved once at construction
// (lifecycle.cpp names each; docs/stats.md says what each counts).
#pragma once

#include <cstdint>

#include <sluice/engine.h>
#include <sluice/stats.h>

#include "core/log.h"

namespace sluice::detail {

// One peer's share of the engine's traffic counters, for live stats' busiest peers, and its
// round-trip estimate. Its own methods are its only writers.
class PeerTraffic {
 public:
  void sent(std::uint64_t msgs, std::uint64_t bytes) {
    msgs_sent_ += msgs;
    bytes_sent_ += bytes;
  }
  void received(std::uint64_t msgs, std::uint64_t bytes) {
    msgs_received_ += msgs;
    bytes_received_ += bytes;
  }
  void credit_stall() { ++credit_stalls_; }
  void sample_rtt(Duration d) { rtt_ = rtt_.count() == 0 ? d : (rtt_ * 7 + d) / 8; }
  // A live-stats line described it: its rates count from here.
  void mark_line() {
    msgs_at_line_ = msgs_sent_ + msgs_received_;
    bytes_at_line_ = bytes_sent_ + bytes_received_;
  }

  std::uint64_t msgs_sent() const { return msgs_sent_; }
  std::uint64_t bytes_sent() const { return bytes_sent_; }
  std::uint64_t msgs_received() const { return msgs_received_; }
  std::uint64_t bytes_received() const { return bytes_received_; }
  std::uint64_t credit_stalls() const { return credit_stalls_; }
  Duration rtt() const { return rtt_; }  // smoothed (heartbeats, timed calls); 0: none yet
  // Both ways, since the last live-stats line.
  std::uint64_t msgs_since_line() const { return msgs_sent_ + msgs_received_ - msgs_at_line_; }
  std::uint64_t bytes_since_line() const { return bytes_sent_ + bytes_received_ - bytes_at_line_; }

 private:
  std::uint64_t msgs_sent_ = 0, bytes_sent_ = 0, msgs_received_ = 0, bytes_received_ = 0;
  std::uint64_t credit_stalls_ = 0;
  Duration rtt_{0};
  std::uint64_t msgs_at_line_ = 0, bytes_at_line_ = 0;
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
  Counter* rpc_window_refused;
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
  Counter* credits_lent;
  Counter* credits_reclaimed;
  Counter* credit_asks;
  Counter* credits_refused;
  Counter* peers_recalled;
  Counter* windows_widened;
  Counter* windows_reclaimed;
  Counter* receives_grown;
  Counter* fifo_stalls;
  Counter* wakeups_missed;

  // The traffic counters and a peer's share of them (live stats), counted together.
  void sent(PeerTraffic& peer, std::uint64_t msgs, std::uint64_t bytes) {
    msgs_sent->add(msgs);
    bytes_sent->add(bytes);
    peer.sent(msgs, bytes);
  }
  void received(PeerTraffic& peer, std::uint64_t msgs, std::uint64_t bytes) {
    msgs_received->add(msgs);
    bytes_received->add(bytes);
    peer.received(msgs, bytes);
  }
  // A message dropped (from a dead peer, before the handshake, ...): counted and logged.
  void dropped(const char* what) {
    dropped_dead->add();
    SLUICE_LOG_RATE_LIMITED(kInfo, "am", "dropped a message: %s", what);
  }
  void credit_stall(PeerTraffic& peer) {
    credit_stalls->add();
    peer.credit_stall();
  }
};

}  // namespace sluice::detail
