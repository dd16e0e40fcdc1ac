#include <sluice/stats.h>

#include <algorithm>

#include <absl/strings/str_format.h>

namespace sluice {

Stats::Named* Stats::find(std::string_view name) {
  for (auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

const Stats::Named* Stats::find(std::string_view name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

Counter& Stats::counter(std::string_view name) {
  if (Named* e = find(name)) return e->counter;
  return entries_.emplace_back(Named{std::string(name), {}, {}, false}).counter;
}

HighWater& Stats::high_water(std::string_view name) {
  if (Named* e = find(name)) return e->hwm;
  return entries_.emplace_back(Named{std::string(name), {}, {}, true}).hwm;
}

std::uint64_t Stats::value(std::string_view name) const {
  const Named* e = find(name);
  if (e == nullptr) return 0;
  return e->is_hwm ? e->hwm.value() : e->counter.value();
}

std::optional<std::size_t> Stats::index_of(std::string_view name) const {
  for (std::size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].name == name) return i;
  return std::nullopt;
}

std::uint64_t Stats::value_at(std::size_t index) const {
  const Named& e = entries_[index];
  return e.is_hwm ? e.hwm.value() : e.counter.value();
}

std::vector<Stats::Entry> Stats::snapshot() const {
  std::vector<Entry> out;
  out.reserve(entries_.size());
  for (const auto& e : entries_) out.push_back({e.name, e.is_hwm ? e.hwm.value() : e.counter.value()});
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.name < b.name; });
  return out;
}

std::string Stats::to_text() const {
  std::string out;
  for (const auto& e : snapshot()) absl::StrAppendFormat(&out, "%-40s %u\n", e.name, e.value);
  return out;
}

std::string Stats::to_json() const {
  std::string out = "{";
  bool first = true;
  for (const auto& e : snapshot()) {
    absl::StrAppendFormat(&out, "%s\"%s\": %u", first ? "" : ", ", e.name, e.value);
    first = false;
  }
  return out + "}";
}

}  // namespace sluice
