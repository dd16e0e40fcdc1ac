// sluice/testing.h — observers for tests: what an engine still holds, a slot's registration.
//
// Not part of the application API (sluice.h does not include it), and not stable: the names
// and what they count follow the implementation. Sluice's own tests use them to check that
// nothing is left behind (every send completed, every exact receive given back); a test of an
// application may do the same. Those given an Engine are called on the thread that drives it
// (engine.h); from another they return 0 (logged, counted in api.wrong_thread). Inside
// namespace sluice, name gtest's namespace ::testing once this header is included.
#pragma once

#include <cstddef>

#include <sluice/api.h>
#include <sluice/engine.h>
#include <sluice/pool.h>

namespace sluice::testing {

// Sends the transport still holds: in flight, their completions not yet run.
SLUICE_API std::size_t outstanding_sends(const Engine& engine);
// Receives posted for rendezvous and reply-buffer payloads that have not completed (not the
// receives kept posted for each peer's eager messages).
SLUICE_API std::size_t posted_exact_receives(const Engine& engine);
// Receive-pool eager slots the peer of `rank` holds: its posted receives' and those of its
// messages kept beyond their handlers (at most its credits + min(SLUICE_RX_POSTED, credits)).
SLUICE_API std::size_t receive_slots_held(const Engine& engine, int rank);
// Peers whose timers the engine visits on every tick (traffic, a handshake, a queue, messages
// held); the others sleep until their next heartbeat or silence deadline.
SLUICE_API std::size_t watched_peers(const Engine& engine);
// The UCX memory handle (ucp_mem_h) that registers `slot`'s memory; nullptr for an empty Slot
// or one kept past its engine. Sends from a Slot use it on their own (Peer::send's Slot form).
SLUICE_API void* memh(const Slot& slot);

}  // namespace sluice::testing
