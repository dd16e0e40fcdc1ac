// sluice/pool.h — registered memory pools, one per direction.
//
// Every engine owns two pools: a send pool (outgoing eager messages, send_copy, buffers the
// application fills in place) and a receive pool (posted receives, credits granted to peers,
// rendezvous landing slots). Each has its own budget (SLUICE_SEND_POOL_MAX,
// SLUICE_RECV_POOL_MAX): nothing on the send side can take from the receive budget, or the
// other way round, so sends can never starve receive refills (the brpc RDMA stall).
//
// A pool is a few size classes. Each class hands out fixed-size slots from chunks of memory
// that Sluice maps itself (2 MiB huge pages when available), binds to the engine's NUMA node,
// touches, and registers once with UCX; each slot carries its chunk's memory handle, so sends
// and receives from slots cost no registration lookup.
//
//   arena (one chunk, SLUICE_POOL_CHUNK rounded up to whole slots and pages, one ucp_mem_map)
//   ┌──────────────┬──────────────┬──────────────┬─────┬──────────────┐
//   │ slot 0       │ slot 1       │ slot 2       │ ... │ slot n-1     │  registered memory
//   └──────────────┴──────────────┴──────────────┴─────┴──────────────┘
//          ▲ data           ▲
//   ┌──────┴─────┐   ┌──────┴─────┐
//   │ descriptor │ → │ descriptor │ → ... free list (engine thread, no lock, no syscall)
//   └────────────┘   └────────────┘
//   descriptors live in ordinary memory beside the arena: {next, data, memh, class}
//   slots released on other threads go to a lock-free stack the owner drains when it is empty
//
// The receive pool has one more class, recv.large: rendezvous landings beyond the largest
// class get an arena of their own (the payload rounded up to 2 MiB), kept after use for the
// next payload it fits. Every landing counts against SLUICE_RECV_POOL_MAX; memory nobody holds
// (kept arenas, chunks all of whose slots are free) is unmapped when another class needs the
// room. Only a handler's sink lands payloads outside the budget.
//
// Threads: slots are taken only on the engine's thread. A Slot may be released (destroyed)
// on any thread; off the engine thread it travels back through the lock-free stack. A Slot
// still held when its engine is destroyed keeps only its descriptor (empty-handed) until it is
// released; it must not be released on another thread while the engine is being destroyed.
//
// Exhaustion is never silent: the call returns at once (Engine::try_get_send_slot:
// kWouldBlock), a counter moves, and one rate-limited warning names the pool, its direction,
// its size, its high-water mark and the variable that raises it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <sluice/api.h>
#include <sluice/status.h>

namespace sluice {

namespace detail {
struct SlotDesc;
struct SlotAccess;
}  // namespace detail

enum class Direction { kSend, kRecv };
SLUICE_API const char* to_string(Direction d);

// A slot of registered memory. Move-only; releasing (or destroying) returns it to its pool.
// A Slot kept past its engine is safe to destroy: the engine leaves it empty-handed (data()
// null, size() 0) and logs how many it found.
class SLUICE_API Slot {
 public:
  Slot() = default;
  Slot(Slot&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Slot& operator=(Slot&& o) noexcept {
    if (this != &o) {
      release();
      d_ = o.d_;
      o.d_ = nullptr;
    }
    return *this;
  }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;
  ~Slot() { release(); }

  explicit operator bool() const { return d_ != nullptr; }
  std::byte* data() const;
  std::size_t size() const;  // the slot's capacity
  // Returns the slot to its pool (any thread). No-op on an empty Slot.
  void release() {
    if (d_ != nullptr) release_slow();
  }

 private:
  friend struct detail::SlotAccess;
  explicit Slot(detail::SlotDesc* d) : d_(d) {}
  void release_slow();
  detail::SlotDesc* d_ = nullptr;
};

// Figures of one size class of one pool.
struct PoolClassStats {
  std::string name;  // "recv.eager", "recv.1M", "send.eager"
  Direction direction;
  std::size_t slot_size;    // 0: "recv.large", landing arenas sized to their payloads
  std::size_t slots_total;  // mapped so far
  std::size_t slots_free;
  std::size_t slots_max;  // what the budget allows for this class alone
  std::size_t reserved;   // eager classes: receive slots reserved (receive), slots held back for replies (send)
  std::uint64_t high_water;
  std::uint64_t growth_events;
  std::uint64_t exhaustion_events;
  std::uint64_t cross_thread_returns;
};

struct PoolStats {
  Direction direction;
  std::size_t budget_bytes;
  std::size_t mapped_bytes;
  std::size_t high_water_bytes;  // most bytes held in slots at once
  std::vector<PoolClassStats> classes;
};

}  // namespace sluice
