// The engine's counters (internal): pointers into its Stats, resolved once at construction
// (lifecycle.cpp names each; docs/stats.md says what each counts).
#pragma once

#include <sluice/stats.h>

namespace sluice::detail {

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
};

}  // namespace sluice::detail
