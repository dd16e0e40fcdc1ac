#include "mem/pool.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include "core/log.h"

namespace sluice {

const char* to_string(Direction d) { return d == Direction::kSend ? "send" : "recv"; }

void Slot::release_slow() {
  d_->owner->release(d_);
  d_ = nullptr;
}

namespace detail {

std::size_t eager_slot_size(std::size_t eager_limit) { return (eager_limit + 64 + 63) / 64 * 64; }

PoolClass::PoolClass(std::string name, std::size_t slot_size, Budget* budget,
                     const ArenaSource* source, bool reserved_only)
    : name_(std::move(name)),
      slot_size_(slot_size),
      budget_(budget),
      source_(source),
      reserved_only_(reserved_only),
      owner_(std::this_thread::get_id()) {}

PoolClass::~PoolClass() {
  if (in_use() != 0) {
    drain_remote();
    if (in_use() != 0) {
      SLUICE_LOG(kError, "mem", "%s pool class %s destroyed with %u slots still held",
                 to_string(budget_->direction), name_, in_use());
    }
  }
}

std::size_t PoolClass::max_slots() const {
  // What the budget allows this class if every other byte stayed as it is.
  std::size_t others = budget_->mapped - total_ * slot_size_;
  return budget_->max > others ? (budget_->max - others) / slot_size_ : 0;
}

absl::Status PoolClass::prime() {
  if (total_ == 0) return grow();
  return absl::OkStatus();
}

absl::Status PoolClass::grow() {
  std::size_t want = std::max(source_->chunk, slot_size_);
  // Capacity reserved for receives but not mapped yet is not ours to take.
  std::size_t unbacked = 0;
  if (!reserved_only_ && budget_->reserved_bytes > 0) {
    // The eager receive class backs the reservations; whatever it has not mapped is owed.
    unbacked = budget_->reserved_bytes;  // conservative: reservations are never lent out
  }
  std::size_t limit = budget_->max > unbacked ? budget_->max - unbacked : 0;
  if (reserved_only_ || reserved_ != 0) limit = budget_->max;  // the class holding them
  std::size_t room = limit > budget_->mapped ? limit - budget_->mapped : 0;
  if (room < slot_size_) {
    map_failed_ = false;  // the budget, not the memory, is what ran out
    return absl::ResourceExhaustedError("budget");
  }
  std::size_t bytes = std::min(want, room / slot_size_ * slot_size_);
  auto arena = source_->fault != nullptr && source_->fault->fails(FaultPoint::kPoolGrow)
                   ? absl::StatusOr<std::unique_ptr<Arena>>(absl::ResourceExhaustedError(
                         "cannot map a pool arena: fault point pool-grow (SLUICE_FAULT_AT)"))
                   : Arena::create(bytes, source_->huge, source_->node, source_->topo, source_->ucx);
  map_failed_ = !arena.ok();
  if (!arena.ok()) {
    SLUICE_LOG_RATE_LIMITED(kWarn, "mem", "%s pool class %s cannot grow: %s",
                            to_string(budget_->direction), name_, arena.status().message());
    return arena.status();
  }
  std::size_t n = bytes / slot_size_;
  auto descs = std::make_unique<SlotDesc[]>(n);
  std::byte* base = (*arena)->data();
  for (std::size_t i = n; i-- > 0;) {
    descs[i] = SlotDesc{free_, base + i * slot_size_, (*arena)->memh(), this, slot_size_};
    free_ = &descs[i];
  }
  free_count_ += n;
  total_ += n;
  budget_->mapped += n * slot_size_;
  arenas_.push_back(std::move(*arena));
  descs_.push_back(std::move(descs));
  ++growth_;
  SLUICE_LOG(kInfo, "mem", "%s pool class %s grew to %u slots of %u B (%s of %s mapped)",
             to_string(budget_->direction), name_, total_, slot_size_,
             format_size(budget_->mapped), format_size(budget_->max));
  return absl::OkStatus();
}

void PoolClass::drain_remote() {
  SlotDesc* list = remote_.exchange(nullptr, std::memory_order_acquire);
  while (list != nullptr) {
    SlotDesc* next = list->next;
    put_back(list);
    ++cross_thread_;
    list = next;
  }
}

void PoolClass::note_exhausted() {
  ++exhausted_;
  SLUICE_LOG_RATE_LIMITED(
      kWarn, "mem",
      "%s pool exhausted: class %s, %u/%u slots of %u B in use, hwm %u, %s%s of %s mapped; %s",
      to_string(budget_->direction), name_, in_use(), total_, slot_size_, high_water_,
      reserved_ != 0 ? absl::StrFormat("%u reserved, ", reserved_) : std::string(),
      format_size(budget_->mapped), format_size(budget_->max),
      // Within the budget but unable to map more, raising the budget would not help.
      map_failed_ ? std::string("it could not map more memory (see the line above)")
                  : absl::StrCat("raise ", reserved_only_ ? "SLUICE_CREDITS or SLUICE_RECV_POOL_MAX"
                                                          : budget_->variable));
}

Result PoolClass::try_get(Slot* out) {
  Result r = try_take(out);
  if (r != Result::kOk) [[unlikely]] note_exhausted();
  return r;
}

Result PoolClass::try_get_reserved(Slot* out) {
  Result r = take(out, true);
  if (r != Result::kOk) [[unlikely]] note_exhausted();
  return r;
}

Result PoolClass::try_take(Slot* out) { return take(out, false); }

Result PoolClass::take(Slot* out, bool from_reserve) {
  // Slots released on other threads count as in use until drained: drain before refusing.
  bool held = false;  // this slot comes out of held-back capacity
  if (reserved_only_) {
    if (in_use() >= reserved_) [[unlikely]] drain_remote();
    if (free_ == nullptr) [[unlikely]] {
      drain_remote();
      if (free_ == nullptr && in_use() < reserved_) (void)grow();
    }
    if (free_ == nullptr || in_use() >= reserved_) [[unlikely]] return Result::kExhausted;
  } else {
    // An ordinary taker leaves room, under the budget, for what is still owed to reserved
    // takers; owed slots need not be mapped yet, only be mappable.
    std::size_t owed = reserved_ > reserved_in_use_ ? reserved_ - reserved_in_use_ : 0;
    held = from_reserve && owed != 0;
    std::size_t keep = held ? 0 : owed;
    if (free_count_ <= keep) [[unlikely]] {
      drain_remote();
      if (free_count_ <= keep) {
        if (in_use() + keep + 1 > max_slots()) return Result::kExhausted;
        if (free_ == nullptr) (void)grow();
        if (free_ == nullptr) return Result::kExhausted;
      }
    }
  }
  SlotDesc* d = free_;
  free_ = d->next;
  --free_count_;
  d->reserved = held;
  if (held) ++reserved_in_use_;
  std::size_t used = total_ - free_count_;
  if (used > high_water_) high_water_ = used;
  budget_->held_bytes += slot_size_;
  if (budget_->held_bytes > budget_->high_water_bytes) budget_->high_water_bytes = budget_->held_bytes;
  *out = Slot(d);
  return Result::kOk;
}

Result PoolClass::get(Slot* out, std::chrono::steady_clock::time_point deadline,
                      const std::function<void()>& progress) {
  while (try_take(out) != Result::kOk) {
    if (std::chrono::steady_clock::now() >= deadline) {
      note_exhausted();  // one event per call, however many attempts
      return Result::kDeadlineExceeded;
    }
    if (progress) progress();
  }
  return Result::kOk;
}

void PoolClass::release(SlotDesc* d) {
  if (std::this_thread::get_id() == owner_) [[likely]] {
    put_back(d);
    return;
  }
  SlotDesc* head = remote_.load(std::memory_order_relaxed);
  do {
    d->next = head;
  } while (!remote_.compare_exchange_weak(head, d, std::memory_order_release,
                                          std::memory_order_relaxed));
}

void PoolClass::put_back(SlotDesc* d) {
  d->next = free_;
  free_ = d;
  ++free_count_;
  budget_->held_bytes -= slot_size_;
  if (d->reserved) [[unlikely]] {
    d->reserved = false;
    --reserved_in_use_;
  }
}

absl::Status PoolClass::reserve(std::size_t n) {
  std::size_t others = budget_->mapped - total_ * slot_size_;
  std::size_t want = (reserved_ + n) * slot_size_;
  if (others + want > budget_->max) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s pool: cannot reserve %u more %u B slots (%u reserved, %s of %s in use by other "
        "classes); raise %s",
        to_string(budget_->direction), n, slot_size_, reserved_, format_size(others),
        format_size(budget_->max), budget_->variable));
  }
  reserved_ += n;
  budget_->reserved_bytes = reserved_ * slot_size_;
  return absl::OkStatus();
}

void PoolClass::unreserve(std::size_t n) {
  reserved_ = n > reserved_ ? 0 : reserved_ - n;
  budget_->reserved_bytes = reserved_ * slot_size_;
}

PoolClassStats PoolClass::stats() const {
  return {name_,       budget_->direction, slot_size_, total_,   free_count_, max_slots(),
          reserved_,   high_water_,        growth_,    exhausted_, cross_thread_};
}

absl::StatusOr<std::unique_ptr<Pool>> Pool::create(Direction dir, const Config& config,
                                                   std::size_t eager_slot, ArenaSource source) {
  Budget b{dir, dir == Direction::kSend ? config.send_pool_max : config.recv_pool_max,
           dir == Direction::kSend ? "SLUICE_SEND_POOL_MAX" : "SLUICE_RECV_POOL_MAX"};
  if (b.max < eager_slot) {
    return absl::InvalidArgumentError(absl::StrFormat("%s=%s is smaller than one eager slot (%u B)",
                                                      b.variable, format_size(b.max), eager_slot));
  }
  std::unique_ptr<Pool> p(new Pool(b));
  p->source_ = source;
  const char* d = to_string(dir);
  p->classes_.push_back(std::make_unique<PoolClass>(absl::StrFormat("%s.eager", d), eager_slot,
                                                    &p->budget_, &p->source_,
                                                    dir == Direction::kRecv));
  for (std::size_t cls : config.pool_classes) {
    if (cls <= eager_slot || cls > b.max) continue;
    p->classes_.push_back(std::make_unique<PoolClass>(
        absl::StrFormat("%s.%s", d, format_size(cls)), cls, &p->budget_, &p->source_, false));
  }
  if (dir == Direction::kSend) SLUICE_RETURN_IF_ERROR(p->eager().prime());
  return p;
}

PoolClass* Pool::class_for(std::size_t bytes) {
  for (auto& c : classes_)
    if (c->slot_size() >= bytes) return c.get();
  return nullptr;
}

void Pool::set_owner(std::thread::id id) {
  for (auto& c : classes_) c->set_owner(id);
}

PoolStats Pool::stats() const {
  PoolStats s{budget_.direction, budget_.max, budget_.mapped, budget_.high_water_bytes, {}};
  for (const auto& c : classes_) s.classes.push_back(c->stats());
  return s;
}

}  // namespace detail
}  // namespace sluice
