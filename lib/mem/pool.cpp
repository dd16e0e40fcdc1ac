#include "mem/pool.h"

#include <algorithm>
#include <cstdlib>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include "core/log.h"

namespace sluice {

const char* to_string(Direction d) { return d == Direction::kSend ? "send" : "recv"; }

void Slot::release_slow() {
  d_->owner->release(d_);
  d_ = nullptr;
}
std::byte* Slot::data() const { return d_ == nullptr ? nullptr : d_->data; }
std::size_t Slot::size() const { return d_ == nullptr ? 0 : d_->size; }

namespace detail {

std::size_t eager_slot_size(std::size_t eager_limit) { return (eager_limit + 64 + 63) / 64 * 64; }

void SlotOwner::release(SlotDesc* d) {
  if (std::this_thread::get_id() == owner_.load(std::memory_order_relaxed)) [[likely]] {
    put_back(d);
    return;
  }
  if (orphaned_) {  // its class is gone: nothing to wait for
    put_back(d);
    return;
  }
  SlotDesc* head = remote_.load(std::memory_order_relaxed);
  do {
    d->next = head;
  } while (!remote_.compare_exchange_weak(head, d, std::memory_order_release, std::memory_order_relaxed));
}

void SlotOwner::drain_remote() {
  SlotDesc* list = remote_.exchange(nullptr, std::memory_order_acquire);
  while (list != nullptr) {
    SlotDesc* next = list->next;
    put_back(list);
    ++cross_thread_;
    list = next;
  }
}

namespace {
// An arena for a pool, or the fault point's refusal (SLUICE_FAULT_AT=pool-grow).
absl::StatusOr<std::unique_ptr<Arena>> map_arena(const ArenaSource& source, std::size_t bytes) {
  if (source.fault != nullptr && source.fault->fails(FaultPoint::kPoolGrow)) {
    return absl::ResourceExhaustedError("cannot map a pool arena: fault point pool-grow (SLUICE_FAULT_AT)");
  }
  return Arena::create(bytes, source.huge, source.node, source.topo, source.ucx);
}
}  // namespace

PoolClass::PoolClass(std::string name, std::size_t slot_size, Budget* budget, const ArenaSource* source,
                     bool reserved_only)
    : name_(std::move(name)), slot_size_(slot_size), budget_(budget), source_(source), reserved_only_(reserved_only) {}

namespace {
// The descriptors of slots still held when their class was destroyed (Slots and Messages kept
// past their engine). They outlive the class, empty-handed (no data, size 0, owned by this),
// until the last of them is released, on any thread; the memory they pointed into is gone.
class OrphanedSlots final : public SlotOwner {
 public:
  // `keep`: what the descriptors lie in.
  static void adopt(const std::vector<SlotDesc*>& held, std::vector<std::shared_ptr<const void>> keep) {
    if (held.empty()) return;
    auto* orphans = new OrphanedSlots(std::move(keep), held.size());
    for (SlotDesc* d : held) *d = SlotDesc{nullptr, nullptr, nullptr, orphans, 0};
  }

 private:
  OrphanedSlots(std::vector<std::shared_ptr<const void>> keep, std::size_t held) : keep_(std::move(keep)), held_(held) {
    orphaned_ = true;
    owner_.store(std::thread::id{}, std::memory_order_relaxed);  // no thread: every release comes here
  }
  void put_back(SlotDesc*) override {
    if (held_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  std::vector<std::shared_ptr<const void>> keep_;
  std::atomic<std::size_t> held_;
};

void log_held_at_destruction(Direction dir, const std::string& name, std::size_t held) {
  SLUICE_LOG(kWarn, "mem",
             "%s pool class %s destroyed with %u slots still held (Slots or Messages kept past their engine): they "
             "are empty now, and safe to destroy",
             to_string(dir), name, held);
}
}  // namespace

PoolClass::~PoolClass() {
  if (in_use() == 0) return;
  drain_remote();
  if (in_use() == 0) return;
  log_held_at_destruction(budget_->direction, name_, in_use());
  for (SlotDesc* d = free_; d != nullptr; d = d->next) d->owner = nullptr;  // marks the free ones
  std::vector<SlotDesc*> held;
  std::vector<std::shared_ptr<const void>> keep;
  for (std::size_t c = 0; c < descs_.size(); ++c) {
    if (descs_[c] == nullptr || chunk_free_[c] == chunk_slots_[c]) continue;
    for (std::uint32_t i = 0; i < chunk_slots_[c]; ++i)
      if (descs_[c][i].owner == this) held.push_back(&descs_[c][i]);
    keep.push_back(std::shared_ptr<SlotDesc[]>(std::move(descs_[c])));
  }
  OrphanedSlots::adopt(held, std::move(keep));
}

std::size_t PoolClass::max_slots() const {
  // What the budget allows this class if every other byte stayed as it is.
  std::size_t others = budget_->mapped - mapped_bytes();
  return budget_->max > others ? (budget_->max - others) / slot_size_ : 0;
}

absl::Status PoolClass::prime() {
  if (total_ == 0) return grow();
  return absl::OkStatus();
}

absl::Status PoolClass::grow() {
  std::size_t want = std::max(source_->chunk, slot_size_);
  bool holder = reserved_only_ || reserved_ != 0;  // the class backing reservations
  std::size_t room = budget_->room(holder);
  if (room < slot_size_ && budget_->pool != nullptr) {
    budget_->pool->reclaim(slot_size_ - room);
    room = budget_->room(holder);
  }
  if (room < slot_size_) {
    map_failed_ = false;  // the budget, not the memory, is what ran out
    return absl::ResourceExhaustedError("budget");
  }
  std::size_t bytes = std::min(want, room / slot_size_ * slot_size_);
  auto arena = map_arena(*source_, bytes);
  map_failed_ = !arena.ok();
  if (!arena.ok()) {
    SLUICE_LOG_RATE_LIMITED(kWarn, "mem", "%s pool class %s cannot grow: %s", to_string(budget_->direction), name_,
                            arena.status().message());
    return arena.status();
  }
  std::size_t n = bytes / slot_size_;
  auto descs = std::make_unique<SlotDesc[]>(n);
  std::byte* base = (*arena)->data();
  auto chunk = static_cast<std::uint32_t>(arenas_.size());
  for (std::size_t i = n; i-- > 0;) {
    descs[i] = SlotDesc{free_, base + i * slot_size_, (*arena)->memh(), this, slot_size_, chunk};
    free_ = &descs[i];
  }
  free_count_ += n;
  total_ += n;
  budget_->mapped += n * slot_size_;
  arenas_.push_back(std::move(*arena));
  descs_.push_back(std::move(descs));
  chunk_slots_.push_back(static_cast<std::uint32_t>(n));
  chunk_free_.push_back(static_cast<std::uint32_t>(n));
  ++growth_;
  SLUICE_LOG(kInfo, "mem", "%s pool class %s grew to %u slots of %u B (%s of %s mapped)", to_string(budget_->direction),
             name_, total_, slot_size_, format_size(budget_->mapped), format_size(budget_->max));
  return absl::OkStatus();
}

std::size_t PoolClass::trim() {
  drain_remote();
  std::vector<bool> gone(arenas_.size(), false);
  bool any = false;
  for (std::size_t i = 0; i < arenas_.size(); ++i) {
    gone[i] = arenas_[i] != nullptr && chunk_free_[i] == chunk_slots_[i];
    any = any || gone[i];
  }
  if (!any) return 0;
  for (SlotDesc** link = &free_; *link != nullptr;) {
    if (gone[(*link)->chunk]) *link = (*link)->next;
    else link = &(*link)->next;
  }
  std::size_t freed = 0;
  for (std::size_t i = 0; i < arenas_.size(); ++i) {
    if (!gone[i]) continue;
    std::size_t n = chunk_slots_[i];
    free_count_ -= n;
    total_ -= n;
    freed += n * slot_size_;
    arenas_[i].reset();
    descs_[i].reset();
    chunk_slots_[i] = chunk_free_[i] = 0;
  }
  budget_->mapped -= freed;
  SLUICE_LOG(kInfo, "mem", "%s pool class %s gave back %s it did not use (%u slots left)",
             to_string(budget_->direction), name_, format_size(freed), total_);
  return freed;
}

void PoolClass::note_exhausted() {
  ++exhausted_;
  SLUICE_LOG_RATE_LIMITED(
      kWarn, "mem", "%s pool exhausted: class %s, %u/%u slots of %u B in use, hwm %u, %s%s of %s mapped; %s",
      to_string(budget_->direction), name_, in_use(), total_, slot_size_, high_water_,
      reserved_ != 0 ? absl::StrFormat("%u reserved, ", reserved_) : std::string(), format_size(budget_->mapped),
      format_size(budget_->max),
      // Within the budget but unable to map more, raising the budget would not help.
      map_failed_
          ? std::string("it could not map more memory (see the line above)")
          : absl::StrCat("raise ", reserved_only_ ? "SLUICE_CREDITS or SLUICE_RECV_POOL_MAX" : budget_->variable));
}

Result PoolClass::try_get(Slot* out) {
  Result r = try_take(out);
  if (r != Result::kOk) [[unlikely]]
    note_exhausted();
  return r;
}

Result PoolClass::try_get_reserved(Slot* out) {
  Result r = take(out, true);
  if (r != Result::kOk) [[unlikely]]
    note_exhausted();
  return r;
}

Result PoolClass::try_take(Slot* out) { return take(out, false); }

Result PoolClass::try_take_free(Slot* out) {
  if (reserved_only_ || reserved_ != 0) return Result::kWouldBlock;  // eager classes lend nothing
  if (free_ == nullptr) drain_remote();
  if (free_ == nullptr) return Result::kWouldBlock;
  return take(out, false);
}

Result PoolClass::take(Slot* out, bool from_reserve) {
  // Slots released on other threads count as in use until drained: drain before refusing.
  bool held = false;  // this slot comes out of held-back capacity
  if (reserved_only_) {
    if (in_use() >= reserved_) [[unlikely]]
      drain_remote();
    if (free_ == nullptr) [[unlikely]] {
      drain_remote();
      if (free_ == nullptr && in_use() < reserved_) (void)grow();
    }
    if (free_ == nullptr || in_use() >= reserved_) [[unlikely]]
      return Result::kWouldBlock;
  } else {
    // An ordinary taker leaves room, under the budget, for what is still owed to reserved
    // takers; owed slots need not be mapped yet, only be mappable.
    std::size_t owed = reserved_ > reserved_in_use_ ? reserved_ - reserved_in_use_ : 0;
    held = from_reserve && owed != 0;
    std::size_t keep = held ? 0 : owed;
    if (free_count_ <= keep) [[unlikely]] {
      drain_remote();
      if (free_count_ <= keep) {
        if (in_use() + keep + 1 > max_slots() && budget_->pool != nullptr) budget_->pool->reclaim(slot_size_);
        if (in_use() + keep + 1 > max_slots()) return Result::kWouldBlock;
        if (free_ == nullptr) (void)grow();
        if (free_ == nullptr) return Result::kWouldBlock;
      }
    }
  }
  SlotDesc* d = free_;
  free_ = d->next;
  --free_count_;
  --chunk_free_[d->chunk];
  d->reserved = held;
  if (held) ++reserved_in_use_;
  std::size_t used = total_ - free_count_;
  if (used > high_water_) high_water_ = used;
  budget_->held_bytes += slot_size_;
  if (budget_->held_bytes > budget_->high_water_bytes) budget_->high_water_bytes = budget_->held_bytes;
  *out = SlotAccess::make(d);
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

void PoolClass::put_back(SlotDesc* d) {
  d->next = free_;
  free_ = d;
  ++free_count_;
  ++chunk_free_[d->chunk];
  ++budget_->returns;
  budget_->held_bytes -= slot_size_;
  if (d->reserved) [[unlikely]] {
    d->reserved = false;
    --reserved_in_use_;
  }
}

absl::Status PoolClass::reserve(std::size_t n) {
  std::size_t others = budget_->mapped - mapped_bytes();
  std::size_t want = (reserved_ + n) * slot_size_;
  if (others + want > budget_->max) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s pool: cannot reserve %u more %u B slots (%u reserved, %s of %s in use by other "
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
  return {name_,     budget_->direction, slot_size_, total_,     free_count_,  max_slots(),
          reserved_, high_water_,        growth_,    exhausted_, cross_thread_};
}

LargeClass::LargeClass(std::string name, Budget* budget, const ArenaSource* source)
    : name_(std::move(name)), budget_(budget), source_(source) {}

LargeClass::~LargeClass() {
  drain_remote();
  if (held_ == 0) return;
  log_held_at_destruction(budget_->direction, name_, held_);
  std::vector<SlotDesc*> held;
  std::vector<std::shared_ptr<const void>> keep;
  for (auto& e : entries_) {
    if (!e->held) continue;
    e->arena.reset();  // unmapped now: only the descriptor stays
    e->heap.reset();
    held.push_back(&e->desc);
    keep.push_back(std::shared_ptr<Entry>(std::move(e)));
  }
  OrphanedSlots::adopt(held, std::move(keep));
}

Result LargeClass::try_take(std::size_t bytes, Slot* out) {
  drain_remote();
  Entry* best = nullptr;
  for (auto& e : entries_) {
    if (!e->held && e->desc.size >= bytes && (best == nullptr || e->desc.size < best->desc.size)) best = e.get();
  }
  if (best == nullptr) {
    std::size_t want = (bytes + kGranule - 1) / kGranule * kGranule;
    if (budget_->room(false) < want && budget_->pool != nullptr) budget_->pool->reclaim(want - budget_->room(false));
    if (budget_->room(false) < want) return Result::kWouldBlock;
    auto e = std::make_unique<Entry>();
    auto arena = map_arena(*source_, want);
    if (arena.ok()) {
      e->desc = SlotDesc{nullptr, (*arena)->data(), (*arena)->memh(), this, want};
      e->arena = std::move(*arena);
      ++maps_;
    } else {
      SLUICE_LOG_RATE_LIMITED(kWarn, "mem", "%s pool class %s cannot map a %s landing (%s); using the heap",
                              to_string(budget_->direction), name_, format_size(want), arena.status().message());
      e->heap.reset(static_cast<std::byte*>(std::aligned_alloc(Arena::kSmallPage, want)));
      if (!e->heap) return Result::kWouldBlock;
      e->desc = SlotDesc{nullptr, e->heap.get(), nullptr, this, want};
    }
    budget_->mapped += want;
    best = e.get();
    entries_.push_back(std::move(e));
  }
  best->held = true;
  best->used_at = ++clock_;
  if (++held_ > high_water_) high_water_ = held_;
  budget_->held_bytes += best->desc.size;
  if (budget_->held_bytes > budget_->high_water_bytes) budget_->high_water_bytes = budget_->held_bytes;
  *out = SlotAccess::make(&best->desc);
  return Result::kOk;
}

void LargeClass::put_back(SlotDesc* d) {
  // A few arenas at most (the budget over 2 MiB), each landing megabytes: a scan is cheap.
  auto it = std::find_if(entries_.begin(), entries_.end(), [d](const auto& e) { return &e->desc == d; });
  if (it == entries_.end()) return;
  (*it)->held = false;
  --held_;
  ++budget_->returns;
  budget_->held_bytes -= d->size;
  if ((*it)->heap) {
    budget_->mapped -= d->size;
    entries_.erase(it);
  }
}

std::size_t LargeClass::trim(std::size_t bytes) {
  drain_remote();
  std::size_t freed = 0;
  while (freed < bytes) {
    auto oldest = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (!(*it)->held && (oldest == entries_.end() || (*it)->used_at < (*oldest)->used_at)) oldest = it;
    }
    if (oldest == entries_.end()) break;
    freed += (*oldest)->desc.size;
    entries_.erase(oldest);
  }
  budget_->mapped -= freed;
  return freed;
}

PoolClassStats LargeClass::stats() const {
  std::size_t kept = entries_.size() - held_;
  return {name_, budget_->direction, 0, entries_.size(), kept, 0, 0, high_water_, maps_, 0, cross_thread_};
}

absl::StatusOr<std::unique_ptr<Pool>> Pool::create(Direction dir, const Config& config, std::size_t eager_slot,
                                                   ArenaSource source) {
  Budget b{dir, dir == Direction::kSend ? config.send_pool_max : config.recv_pool_max,
           dir == Direction::kSend ? "SLUICE_SEND_POOL_MAX" : "SLUICE_RECV_POOL_MAX"};
  if (b.max < eager_slot) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s=%s is smaller than one eager slot (%u B)", b.variable, format_size(b.max), eager_slot));
  }
  std::unique_ptr<Pool> p(new Pool(b));
  p->source_ = source;
  const char* d = to_string(dir);
  p->classes_.push_back(std::make_unique<PoolClass>(absl::StrFormat("%s.eager", d), eager_slot, &p->budget_,
                                                    &p->source_, dir == Direction::kRecv));
  for (std::size_t cls : config.pool_classes) {
    if (cls <= eager_slot || cls > b.max) continue;
    p->classes_.push_back(std::make_unique<PoolClass>(absl::StrFormat("%s.%s", d, format_size(cls)), cls, &p->budget_,
                                                      &p->source_, false));
  }
  if (dir == Direction::kRecv) {
    // Only receive memory is ever unmapped while the engine lives: a send slot given back
    // after a force close may still be read by the transport (peer_table.cpp).
    p->budget_.pool = p.get();
    p->large_ = std::make_unique<LargeClass>(absl::StrFormat("%s.large", d), &p->budget_, &p->source_);
  }
  if (dir == Direction::kSend) SLUICE_RETURN_IF_ERROR(p->eager().prime());
  return p;
}

PoolClass* Pool::class_for(std::size_t bytes) {
  for (auto& c : classes_)
    if (c->slot_size() >= bytes) return c.get();
  return nullptr;
}

Result Pool::try_take_landing(std::size_t bytes, Slot* out) {
  auto c = classes_.begin() + 1;  // the eager class holds reservations, never landings
  while (c != classes_.end() && (*c)->slot_size() < bytes) ++c;
  if (c != classes_.end()) {
    if ((*c)->try_take(out) == Result::kOk) return Result::kOk;
    for (auto larger = c + 1; larger != classes_.end(); ++larger) {
      if ((*larger)->try_take_free(out) == Result::kOk) return Result::kOk;
    }
  }
  return large_ ? large_->try_take(bytes, out) : Result::kWouldBlock;
}

std::size_t Pool::landing_room() const {
  // What is left once everything but the eager class (never unmapped) is: Budget::room. Its
  // reservations live in its mapped slots as far as those go (it is reserved_only here).
  std::size_t fixed = std::max(budget_.reserved_bytes, classes_.front()->mapped_bytes());
  return budget_.max > fixed ? budget_.max - fixed : 0;
}

bool Pool::can_ever_land(std::size_t bytes) const {
  std::size_t limit = landing_room();
  // Every place try_take_landing looks: the smallest class that holds it (a larger class only
  // lends slots that fit the budget too), then a landing arena of its own.
  for (auto c = classes_.begin() + 1; c != classes_.end(); ++c) {
    if ((*c)->slot_size() >= bytes) {
      if ((*c)->slot_size() <= limit) return true;
      break;
    }
  }
  return large_ && (bytes + LargeClass::kGranule - 1) / LargeClass::kGranule * LargeClass::kGranule <= limit;
}

std::size_t Pool::reclaim(std::size_t bytes) {
  std::size_t freed = large_ ? large_->trim(bytes) : 0;
  for (auto c = classes_.begin() + 1; c != classes_.end() && freed < bytes; ++c) freed += (*c)->trim();
  return freed;
}

void Pool::set_owner(std::thread::id id) {
  for (auto& c : classes_) c->set_owner(id);
  if (large_) large_->set_owner(id);
}

PoolStats Pool::stats() const {
  PoolStats s{budget_.direction, budget_.max, budget_.mapped, budget_.high_water_bytes, {}};
  for (const auto& c : classes_) s.classes.push_back(c->stats());
  if (large_) s.classes.push_back(large_->stats());
  return s;
}

}  // namespace detail
}  // namespace sluice
