// The C API's statistics: counters by name and by id, per-method RPC figures, pool figures.
#include <cstdio>
#include <string>

#include "c/c_api.h"

namespace sluice::capi {
namespace {

// The engine's counters, or nullptr (with the detail set) from a thread that does not drive
// it: C++ answers an empty registry there (logged), and an engine always has counters.
const Stats* counters(slc_engine_t* engine, const char* what) {
  const Stats& s = engine_of(engine)->stats();
  if (s.size() == 0) [[unlikely]] {
    fail(SLC_ERR_INVALID, what);
    return nullptr;
  }
  return &s;
}

// The id of counter `name` in `s`, or SLC_ERR_NOT_FOUND.
std::int32_t find(const Stats& s, std::string_view name, std::uint32_t* id) {
  std::optional<std::size_t> i = s.index_of(name);
  if (!i) return fail_text(SLC_ERR_NOT_FOUND, "no counter named " + std::string(name));
  *id = static_cast<std::uint32_t>(*i);
  return SLC_OK;
}

std::int32_t method_stats(slc_engine_t* engine, std::uint16_t method, bool server, slc_method_stats_t* out) {
  constexpr std::uint64_t kKnown = SLC_METHOD_STATS_FIELD_COUNTS | SLC_METHOD_STATS_FIELD_LATENCY;
  if (std::int32_t s = check_mask(out->field_mask, kKnown, "slc_engine_method_stats"); s != SLC_OK) return s;
  if (method > SLC_MAX_HANDLERS) return fail(SLC_ERR_INVALID, "slc_engine_method_stats: method above SLC_MAX_HANDLERS");
  for (const MethodStats& m : engine_of(engine)->method_stats()) {
    if (m.method != method || m.server != server) continue;
    if (out->field_mask & SLC_METHOD_STATS_FIELD_COUNTS) {
      out->calls = m.calls;
      out->errors = m.errors;
      out->timed = m.timed;
    }
    if (out->field_mask & SLC_METHOD_STATS_FIELD_LATENCY) {
      out->p50_ns = m.p50.count();
      out->p90_ns = m.p90.count();
      out->p99_ns = m.p99.count();
      out->max_ns = m.max.count();
    }
    return SLC_OK;
  }
  return fail_text(SLC_ERR_NOT_FOUND, "no calls of method " + std::to_string(method) + (server ? " served" : " made"));
}

// The pool of `direction`, or SLC_ERR_INVALID for another direction or thread (C++ answers
// a pool without a budget there, logged; a real pool always has one).
std::int32_t pool_of(slc_engine_t* engine, std::int32_t direction, const char* what, PoolStats* out) {
  if (direction != SLC_POOL_SEND && direction != SLC_POOL_RECV)
    return fail_text(SLC_ERR_INVALID, std::string(what) + ": direction is neither SLC_POOL_SEND nor SLC_POOL_RECV");
  *out = engine_of(engine)->pool_stats(direction == SLC_POOL_SEND ? Direction::kSend : Direction::kRecv);
  if (out->budget_bytes == 0) [[unlikely]]
    return fail_text(SLC_ERR_INVALID, std::string(what) + ": not the engine's thread");
  return SLC_OK;
}

std::int32_t pool_stats(slc_engine_t* engine, std::int32_t direction, slc_pool_stats_t* out) {
  constexpr std::uint64_t kKnown = SLC_POOL_STATS_FIELD_BYTES | SLC_POOL_STATS_FIELD_CLASSES;
  if (std::int32_t s = check_mask(out->field_mask, kKnown, "slc_engine_pool_stats"); s != SLC_OK) return s;
  PoolStats p;
  if (std::int32_t s = pool_of(engine, direction, "slc_engine_pool_stats", &p); s != SLC_OK) return s;
  if (out->field_mask & SLC_POOL_STATS_FIELD_BYTES) {
    out->budget_bytes = p.budget_bytes;
    out->mapped_bytes = p.mapped_bytes;
    out->high_water_bytes = p.high_water_bytes;
  }
  if (out->field_mask & SLC_POOL_STATS_FIELD_CLASSES) out->classes = static_cast<std::uint32_t>(p.classes.size());
  return SLC_OK;
}

std::int32_t pool_class_stats(slc_engine_t* engine, std::int32_t direction, std::uint32_t index,
                              slc_pool_class_stats_t* out) {
  constexpr std::uint64_t kKnown = SLC_POOL_CLASS_FIELD_NAME | SLC_POOL_CLASS_FIELD_SLOTS | SLC_POOL_CLASS_FIELD_EVENTS;
  if (std::int32_t s = check_mask(out->field_mask, kKnown, "slc_engine_pool_class_stats"); s != SLC_OK) return s;
  PoolStats p;
  if (std::int32_t s = pool_of(engine, direction, "slc_engine_pool_class_stats", &p); s != SLC_OK) return s;
  if (index >= p.classes.size())
    return fail_text(SLC_ERR_NOT_FOUND, "the pool has " + std::to_string(p.classes.size()) + " classes");
  const PoolClassStats& c = p.classes[index];
  if (out->field_mask & SLC_POOL_CLASS_FIELD_NAME) std::snprintf(out->name, sizeof out->name, "%s", c.name.c_str());
  if (out->field_mask & SLC_POOL_CLASS_FIELD_SLOTS) {
    out->slot_size = c.slot_size;
    out->slots_total = c.slots_total;
    out->slots_free = c.slots_free;
    out->slots_max = c.slots_max;
    out->reserved = c.reserved;
  }
  if (out->field_mask & SLC_POOL_CLASS_FIELD_EVENTS) {
    out->high_water = c.high_water;
    out->growth_events = c.growth_events;
    out->exhaustion_events = c.exhaustion_events;
    out->cross_thread_returns = c.cross_thread_returns;
  }
  return SLC_OK;
}

}  // namespace
}  // namespace sluice::capi

using namespace sluice;
using namespace sluice::capi;

extern "C" {

int32_t slc_engine_stat(slc_engine_t* engine, const char* name, size_t length, uint64_t* value) {
  std::string_view key;
  if (engine == nullptr || value == nullptr || !text_of(name, length, &key))
    return fail(SLC_ERR_INVALID, "slc_engine_stat: NULL engine, value or name");
  return guarded([&]() -> std::int32_t {
    const Stats* s = counters(engine, "slc_engine_stat: not the engine's thread");
    std::uint32_t id = 0;
    if (s == nullptr) return SLC_ERR_INVALID;
    if (std::int32_t r = find(*s, key, &id); r != SLC_OK) return r;
    *value = s->value_at(id);
    return SLC_OK;
  });
}

int32_t slc_engine_stat_id(slc_engine_t* engine, const char* name, size_t length, uint32_t* id) {
  std::string_view key;
  if (engine == nullptr || id == nullptr || !text_of(name, length, &key))
    return fail(SLC_ERR_INVALID, "slc_engine_stat_id: NULL engine, id or name");
  return guarded([&]() -> std::int32_t {
    const Stats* s = counters(engine, "slc_engine_stat_id: not the engine's thread");
    return s == nullptr ? SLC_ERR_INVALID : find(*s, key, id);
  });
}

int32_t slc_engine_stat_by_id(slc_engine_t* engine, uint32_t id, uint64_t* value) {
  if (engine == nullptr || value == nullptr)
    return fail(SLC_ERR_INVALID, "slc_engine_stat_by_id: NULL engine or value");
  return guarded([&]() -> std::int32_t {
    const Stats* s = counters(engine, "slc_engine_stat_by_id: not the engine's thread");
    if (s == nullptr) return SLC_ERR_INVALID;
    if (id >= s->size()) return fail(SLC_ERR_NOT_FOUND, "slc_engine_stat_by_id: no counter with that id");
    *value = s->value_at(id);
    return SLC_OK;
  });
}

int32_t slc_engine_stat_name(slc_engine_t* engine, uint32_t id, const char** name, size_t* length) {
  if (name != nullptr) *name = nullptr;
  if (engine == nullptr || name == nullptr) return fail(SLC_ERR_INVALID, "slc_engine_stat_name: NULL engine or name");
  return guarded([&]() -> std::int32_t {
    const Stats* s = counters(engine, "slc_engine_stat_name: not the engine's thread");
    if (s == nullptr) return SLC_ERR_INVALID;
    if (id >= s->size()) return fail(SLC_ERR_NOT_FOUND, "slc_engine_stat_name: no counter with that id");
    std::string_view n = s->name_at(id);
    *name = n.data();
    if (length != nullptr) *length = n.size();
    return SLC_OK;
  });
}

int32_t slc_engine_method_stats(slc_engine_t* engine, uint16_t method, int32_t server, slc_method_stats_t* out) {
  if (engine == nullptr || out == nullptr) return fail(SLC_ERR_INVALID, "slc_engine_method_stats: NULL engine or out");
  return guarded([&]() -> std::int32_t { return method_stats(engine, method, server != 0, out); });
}

int32_t slc_engine_pool_stats(slc_engine_t* engine, int32_t direction, slc_pool_stats_t* out) {
  if (engine == nullptr || out == nullptr) return fail(SLC_ERR_INVALID, "slc_engine_pool_stats: NULL engine or out");
  return guarded([&]() -> std::int32_t { return pool_stats(engine, direction, out); });
}

int32_t slc_engine_pool_class_stats(slc_engine_t* engine, int32_t direction, uint32_t index,
                                    slc_pool_class_stats_t* out) {
  if (engine == nullptr || out == nullptr)
    return fail(SLC_ERR_INVALID, "slc_engine_pool_class_stats: NULL engine or out");
  return guarded([&]() -> std::int32_t { return pool_class_stats(engine, direction, index, out); });
}

}  // extern "C"
