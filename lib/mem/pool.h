// Pools (internal): size classes of registered slots, one pool per direction.
// The public face (Slot, PoolStats, the layout drawing) is in <sluice/pool.h>.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <sluice/config.h>
#include <sluice/pool.h>

#include "core/fault.h"
#include "mem/arena.h"

namespace sluice::detail {

class Pool;
class SlotOwner;

// A slot's descriptor. Descriptors live in ordinary memory beside their arena.
struct SlotDesc {
  SlotDesc* next;
  std::byte* data;
  void* memh;
  SlotOwner* owner;
  std::size_t size;
  std::uint32_t chunk = 0;  // the arena it lies in, within its class
  bool reserved = false;    // taken from a held-back reservation (send pool: reply capacity)
};

// The library's side of a Slot: its descriptor without a call, Slots made from descriptors,
// and a descriptor taken out of its Slot (the C API's slc_mem_t owns one as a bare pointer).
struct SlotAccess {
  static SlotDesc* desc(const Slot& s) { return s.d_; }
  static Slot make(SlotDesc* d) { return Slot(d); }
  static SlotDesc* take(Slot& s) { return std::exchange(s.d_, nullptr); }
};
inline std::byte* slot_data(const Slot& s) { return SlotAccess::desc(s)->data; }
inline std::size_t slot_size(const Slot& s) { return SlotAccess::desc(s)->size; }  // capacity
inline void* slot_memh(const Slot& s) { return SlotAccess::desc(s)->memh; }

// The byte budget of one direction; shared by that direction's classes, never the other's.
struct Budget {
  Direction direction;
  std::size_t max;
  const char* variable;  // the variable that raises it
  std::size_t mapped = 0;
  std::size_t reserved_bytes = 0;  // reservations (eager class)
  std::size_t held_bytes = 0;      // in slots handed out now
  std::size_t high_water_bytes = 0;
  std::uint64_t returns = 0;  // slots given back on the owner's thread, ever
  Pool* pool = nullptr;       // reclaims unheld memory for a class that cannot grow (receive)

  // Bytes a class may still map. Reservations not backed yet are owed to the class holding
  // them, so only it may map into them: in the receive pool those beyond what its eager class
  // has mapped; in the send pool (whose mapped eager slots may be in ordinary use) all of them.
  std::size_t room(bool holds_reservations) const;
};

// What a slot goes back to. release() on any thread; off the owner's thread the slot waits on
// a lock-free stack until the owner drains it.
class SlotOwner {
 public:
  virtual ~SlotOwner() = default;
  void release(SlotDesc* d);
  void set_owner(std::thread::id id) { owner_.store(id, std::memory_order_relaxed); }

 protected:
  virtual void put_back(SlotDesc* d) = 0;
  void drain_remote();
  std::atomic<std::thread::id> owner_{std::this_thread::get_id()};
  std::uint64_t cross_thread_ = 0;
  bool orphaned_ = false;  // an OrphanedSlots: release() puts back on any thread

 private:
  std::atomic<SlotDesc*> remote_{nullptr};
};

// Where and how arenas are made.
struct ArenaSource {
  const Topology* topo = nullptr;
  const TransportContext* ucx = nullptr;
  int node = -1;
  HugePages huge = HugePages::kTry;
  std::size_t chunk = std::size_t{2} << 20;
  FaultTrigger* fault = nullptr;  // SLUICE_FAULT_AT=pool-grow (fault tests)
};

// The verbs say what an empty class does: get* counts it (pool.exhausted) and warns,
// rate-limited; take* is quiet, for callers that treat it as routine and say themselves what
// waits.
class PoolClass final : public SlotOwner {
 public:
  PoolClass(std::string name, std::size_t slot_size, Budget* budget, const ArenaSource* source, bool reserved_only);
  ~PoolClass() override;

  // Takes a slot. kWouldBlock when the class is empty and the budget (or, with reserved_only,
  // the reservation) forbids growth: slots free as their holders release them. Engine thread
  // only.
  Result try_get(Slot* out);
  // try_get for callers that handle an empty class as routine backpressure (re-posting
  // receives): no exhaustion event, no warning.
  Result try_take(Slot* out);
  // A slot only if one is free now: no growth (a larger class lending a slot to a landing).
  Result try_take_free(Slot* out);
  // try_get, calling `progress` between attempts until `deadline`; kDeadlineExceeded then.
  Result get(Slot* out, std::chrono::steady_clock::time_point deadline, const std::function<void()>& progress);

  // Reservations, checked against the budget (ResourceExhausted when it cannot back `n` more
  // slots). In a reserved_only class (receive pool, eager class) only reserved capacity can be
  // handed out at all. In any other class (send pool, eager class: reply capacity) reserved
  // slots are held back: try_get/try_take leave them, and only try_get_reserved takes them.
  absl::Status reserve(std::size_t n);
  void unreserve(std::size_t n);
  std::size_t reserved() const { return reserved_; }
  // Slots the whole budget would hold.
  std::size_t budget_slots() const { return budget_->max / slot_size_; }
  // How many more slots reserve() would accept now.
  std::size_t reservable() const {
    std::size_t others = budget_->mapped - mapped_bytes();
    std::size_t fit = budget_->max > others ? (budget_->max - others) / slot_size_ : 0;
    return fit > reserved_ ? fit - reserved_ : 0;
  }
  // try_get that may use held-back capacity (and ordinary capacity once that is used up).
  Result try_get_reserved(Slot* out);

  // Maps the first chunk now (pools start with one chunk).
  absl::Status prime();
  // Unmaps the chunks none of whose slots is held; the bytes freed.
  std::size_t trim();

  std::size_t slot_size() const { return slot_size_; }
  const std::string& name() const { return name_; }
  std::size_t in_use() const { return total_ - free_count_; }
  std::size_t mapped_bytes() const { return total_ * slot_size_; }
  PoolClassStats stats() const;

 private:
  absl::Status grow();
  std::size_t max_slots() const;
  void note_exhausted();
  Result take(Slot* out, bool from_reserve);
  void put_back(SlotDesc* d) override;

  std::string name_;
  std::size_t slot_size_;
  Budget* budget_;
  const ArenaSource* source_;
  bool reserved_only_;
  SlotDesc* free_ = nullptr;
  std::size_t free_count_ = 0;
  std::size_t total_ = 0;
  std::size_t reserved_ = 0;
  std::size_t reserved_in_use_ = 0;  // held-back slots handed out (not reserved_only)
  // Per chunk (null once trimmed): its arena, descriptors, slot count and free slots.
  std::vector<std::unique_ptr<Arena>> arenas_;
  std::vector<std::unique_ptr<SlotDesc[]>> descs_;
  std::vector<std::uint32_t> chunk_slots_, chunk_free_;
  std::uint64_t high_water_ = 0, growth_ = 0, exhausted_ = 0;
  bool map_failed_ = false;  // the last growth within the budget could not map its chunk
};

// Landing memory beyond the largest class (receive pool): one arena per slot, the payload's size
// rounded up to 2 MiB, kept when given back for the next payload it fits, unmapped when the
// budget needs the room. It counts against the budget like any class. When no arena can be
// mapped (the kernel refused), a landing takes page-aligned heap memory instead, counted the
// same way and freed when given back.
class LargeClass final : public SlotOwner {
 public:
  static constexpr std::size_t kGranule = std::size_t{2} << 20;
  LargeClass(std::string name, Budget* budget, const ArenaSource* source);
  ~LargeClass() override;
  // A slot of at least `bytes`: the smallest kept arena that fits, else a new one when the
  // budget has room (after reclaiming unheld memory). kWouldBlock otherwise, nothing logged: the
  // caller waits and says so.
  Result try_take(std::size_t bytes, Slot* out);
  // Unmaps kept arenas, least recently used first, until `bytes` are freed or none is left;
  // the bytes freed.
  std::size_t trim(std::size_t bytes);
  PoolClassStats stats() const;

 private:
  struct FreeDeleter {
    void operator()(std::byte* p) const { std::free(p); }
  };
  struct Entry {
    std::unique_ptr<Arena> arena;
    std::unique_ptr<std::byte, FreeDeleter> heap;  // when no arena could be mapped: not kept
    SlotDesc desc{};
    std::uint64_t used_at = 0;
    bool held = false;
  };
  void put_back(SlotDesc* d) override;

  std::string name_;
  Budget* budget_;
  const ArenaSource* source_;
  std::vector<std::unique_ptr<Entry>> entries_;
  std::uint64_t clock_ = 0, high_water_ = 0, maps_ = 0;
  std::size_t held_ = 0;
};

// One direction's pool: an eager class and the large classes, sharing one budget.
class Pool {
 public:
  static absl::StatusOr<std::unique_ptr<Pool>> create(Direction dir, const Config& config, std::size_t eager_slot,
                                                      ArenaSource source);
  PoolClass& eager() { return *classes_.front(); }
  // The smallest class whose slots hold `bytes`, nullptr when none does.
  PoolClass* class_for(std::size_t bytes);
  // Memory for a rendezvous landing of `bytes` (receive pool): a slot of the smallest large
  // class that holds it, else a free slot of a larger class, else a landing arena. kWouldBlock
  // when the budget has no room now (what is held must be released first); nothing logged.
  Result try_take_landing(std::size_t bytes, Slot* out);
  // Whether a landing of `bytes` fits the budget at all, whatever is released: in the smallest
  // class that holds it, or in a landing arena of its own.
  bool can_ever_land(std::size_t bytes) const;
  // The budget less what the eager class needs (its reservations, or its mapped memory if more):
  // what landings may map.
  std::size_t landing_room() const;
  // Unmaps memory nobody holds (kept landing arenas, then whole free chunks of the large
  // classes) until `bytes` are freed or nothing more can be; the bytes freed.
  std::size_t reclaim(std::size_t bytes);
  void set_owner(std::thread::id id);
  PoolStats stats() const;
  const Budget& budget() const { return budget_; }
  // Changes whenever a slot comes back on the owner's thread (a waiting landing may fit now).
  std::uint64_t returns() const { return budget_.returns; }

 private:
  explicit Pool(Budget b) : budget_(b) {}
  Budget budget_;
  ArenaSource source_;
  std::vector<std::unique_ptr<PoolClass>> classes_;
  std::unique_ptr<LargeClass> large_;  // receive pool only
};

inline std::size_t Budget::room(bool holds_reservations) const {
  // Only the receive pool (pool != nullptr) has a reserved_only eager class, whose mapped slots
  // back its reservations.
  std::size_t backed = pool != nullptr ? pool->eager().mapped_bytes() : 0;
  std::size_t unbacked = reserved_bytes > backed ? reserved_bytes - backed : 0;
  std::size_t limit = holds_reservations ? max : (max > unbacked ? max - unbacked : 0);
  return limit > mapped ? limit - mapped : 0;
}

// The eager slot size for an eager limit: limit plus wire header, rounded to 64 bytes.
std::size_t eager_slot_size(std::size_t eager_limit);

}  // namespace sluice::detail
