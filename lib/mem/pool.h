// Pools (internal): size classes of registered slots, one pool per direction.
// The public face (Slot, PoolStats, the layout drawing) is in <sluice/pool.h>.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <sluice/config.h>
#include <sluice/pool.h>

#include "core/fault.h"
#include "mem/arena.h"

namespace sluice::detail {

class PoolClass;

// The byte budget of one direction; shared by that direction's classes, never the other's.
struct Budget {
  Direction direction;
  std::size_t max;
  const char* variable;  // the variable that raises it
  std::size_t mapped = 0;
  std::size_t reserved_bytes = 0;  // receive reservations (eager class)
  std::size_t held_bytes = 0;      // in slots handed out now
  std::size_t high_water_bytes = 0;
};

// Where and how arenas are made.
struct ArenaSource {
  const Topology* topo = nullptr;
  const UcxContext* ucx = nullptr;
  int node = -1;
  HugePages huge = HugePages::kTry;
  std::size_t chunk = std::size_t{2} << 20;
  FaultTrigger* fault = nullptr;  // SLUICE_FAULT_AT=pool-grow (fault tests)
};

class PoolClass {
 public:
  PoolClass(std::string name, std::size_t slot_size, Budget* budget, const ArenaSource* source,
            bool reserved_only);
  ~PoolClass();

  // Takes a slot. kExhausted when the class is empty and the budget (or, with reserved_only,
  // the reservation) forbids growth. Engine thread only.
  Result try_get(Slot* out);
  // try_get for callers that handle an empty class as routine backpressure (re-posting
  // receives): no exhaustion event, no warning.
  Result try_take(Slot* out);
  // try_get, calling `progress` between attempts until `deadline`; kDeadlineExceeded then.
  Result get(Slot* out, std::chrono::steady_clock::time_point deadline,
             const std::function<void()>& progress);

  // Reservations, checked against the budget (ResourceExhausted when it cannot back `n` more
  // slots). In a reserved_only class (receive pool, eager class) only reserved capacity can be
  // handed out at all. In any other class (send pool, eager class: reply capacity) reserved
  // slots are held back: try_get/try_take leave them, and only try_get_reserved takes them.
  absl::Status reserve(std::size_t n);
  void unreserve(std::size_t n);
  std::size_t reserved() const { return reserved_; }
  // try_get that may use held-back capacity (and ordinary capacity once that is used up).
  Result try_get_reserved(Slot* out);

  // Maps the first chunk now (pools start with one chunk).
  absl::Status prime();

  void release(SlotDesc* d);  // any thread
  void set_owner(std::thread::id id) { owner_ = id; }

  std::size_t slot_size() const { return slot_size_; }
  const std::string& name() const { return name_; }
  std::size_t in_use() const { return total_ - free_count_; }
  PoolClassStats stats() const;

 private:
  absl::Status grow();
  std::size_t max_slots() const;
  void drain_remote();
  void note_exhausted();
  Result take(Slot* out, bool from_reserve);
  void put_back(SlotDesc* d);

  std::string name_;
  std::size_t slot_size_;
  Budget* budget_;
  const ArenaSource* source_;
  bool reserved_only_;
  std::thread::id owner_;
  SlotDesc* free_ = nullptr;
  std::size_t free_count_ = 0;
  std::size_t total_ = 0;
  std::size_t reserved_ = 0;
  std::size_t reserved_in_use_ = 0;  // held-back slots handed out (not reserved_only)
  std::atomic<SlotDesc*> remote_{nullptr};
  std::vector<std::unique_ptr<Arena>> arenas_;
  std::vector<std::unique_ptr<SlotDesc[]>> descs_;
  std::uint64_t high_water_ = 0, growth_ = 0, exhausted_ = 0, cross_thread_ = 0;
  bool map_failed_ = false;  // the last growth within the budget could not map its chunk
};

// One direction's pool: an eager class and the large classes, sharing one budget.
class Pool {
 public:
  static absl::StatusOr<std::unique_ptr<Pool>> create(Direction dir, const Config& config,
                                                      std::size_t eager_slot,
                                                      ArenaSource source);
  PoolClass& eager() { return *classes_.front(); }
  // The smallest class whose slots hold `bytes`, nullptr when none does.
  PoolClass* class_for(std::size_t bytes);
  void set_owner(std::thread::id id);
  PoolStats stats() const;
  const Budget& budget() const { return budget_; }

 private:
  explicit Pool(Budget b) : budget_(b) {}
  Budget budget_;
  ArenaSource source_;
  std::vector<std::unique_ptr<PoolClass>> classes_;
};

// The eager slot size for an eager limit: limit plus wire header, rounded to 64 bytes.
std::size_t eager_slot_size(std::size_t eager_limit);

}  // namespace sluice::detail
