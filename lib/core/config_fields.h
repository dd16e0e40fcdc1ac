// The field makers of the configuration table (internal): one per variable type, each a
// ConfigVarSpec that parses into and prints from a Settings member. config_table.cpp only.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>

#include "core/config_table.h"
#include "core/strings.h"

namespace sluice::detail::config_fields {

using Field = ConfigVarSpec;

template <typename T>
absl::StatusOr<T> parse_int(std::string_view text, T lo, T hi) {
  std::string_view t = sluice::detail::trim(text);
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || ec == std::errc::result_out_of_range) {
    if (ec == std::errc::result_out_of_range) return absl::InvalidArgumentError("out of range");
    return absl::InvalidArgumentError("not an integer");
  }
  if (ec != std::errc() || end != t.data() + t.size()) return absl::InvalidArgumentError("not an integer");
  if (v < static_cast<std::int64_t>(lo) || v > static_cast<std::int64_t>(hi))
    return absl::InvalidArgumentError("out of range");
  return static_cast<T>(v);
}

template <typename T, typename S>
Field int_var(const char* name, const char* comp, const char* def, const char* doc, T S::*field, T lo, T hi) {
  return {name,
          comp,
          absl::StrFormat("int [%d, %d]", lo, hi),
          def,
          doc,
          [=](std::string_view s, Settings& c) -> absl::Status {
            auto v = parse_int<T>(s, lo, hi);
            if (!v.ok()) return v.status();
            c.*field = *v;
            return absl::OkStatus();
          },
          [=](const Settings& c) { return std::to_string(c.*field); }};
}

template <typename S>
Field size_var(const char* name, const char* comp, const char* def, const char* doc, std::size_t S::*field,
               std::size_t lo) {
  return {name,
          comp,
          absl::StrFormat("size >= %s", format_size(lo)),
          def,
          doc,
          [=](std::string_view s, Settings& c) -> absl::Status {
            auto v = parse_size(s);
            if (!v.ok()) return v.status();
            if (*v < lo) return absl::InvalidArgumentError("below the minimum");
            c.*field = *v;
            return absl::OkStatus();
          },
          [=](const Settings& c) { return format_size(c.*field); }};
}

template <typename S>
Field duration_var(const char* name, const char* comp, const char* def, const char* doc, Duration S::*field,
                   bool allow_inf) {
  return {name,
          comp,
          allow_inf ? "duration | inf" : "duration",
          def,
          doc,
          [=](std::string_view s, Settings& c) -> absl::Status {
            if (allow_inf && sluice::detail::lower(sluice::detail::trim(s)) == "inf") {
              c.*field = kInfinite;
              return absl::OkStatus();
            }
            auto v = parse_duration(s);
            if (!v.ok()) return v.status();
            if (v->count() <= 0) return absl::InvalidArgumentError("must be greater than 0");
            c.*field = *v;
            return absl::OkStatus();
          },
          [=](const Settings& c) { return format_duration(c.*field); }};
}

template <typename S>
Field bool_var(const char* name, const char* comp, const char* def, const char* doc, bool S::*field) {
  return {name,
          comp,
          "bool",
          def,
          doc,
          [=](std::string_view s, Settings& c) -> absl::Status {
            auto v = parse_bool(s);
            if (!v.ok()) return v.status();
            c.*field = *v;
            return absl::OkStatus();
          },
          [=](const Settings& c) { return std::string(c.*field ? "y" : "n"); }};
}

template <typename E, typename S>
Field enum_var(const char* name, const char* comp, const char* def, const char* doc, E S::*field,
               std::vector<std::pair<const char*, E>> values) {
  std::vector<std::string> names;
  names.reserve(values.size());
  for (auto& [n, v] : values) names.emplace_back(n);
  return {name,
          comp,
          "enum: " + absl::StrJoin(names, "|"),
          def,
          doc,
          [=](std::string_view s, Settings& c) -> absl::Status {
            std::string lower = sluice::detail::lower(sluice::detail::trim(s));
            for (auto& [n, v] : values) {
              if (lower == n) {
                c.*field = v;
                return absl::OkStatus();
              }
            }
            return absl::InvalidArgumentError("not one of the allowed values");
          },
          [=](const Settings& c) -> std::string {
            for (auto& [n, v] : values)
              if (c.*field == v) return n;
            return "?";
          }};
}

template <typename S>
Field string_var(const char* name, const char* comp, const char* type, const char* def, const char* doc,
                 std::string S::*field) {
  return {name,
          comp,
          type,
          def,
          doc,
          [=](std::string_view s, Settings& c) -> absl::Status {
            c.*field = std::string(s);
            return absl::OkStatus();
          },
          [=](const Settings& c) { return c.*field; }};
}

}  // namespace sluice::detail::config_fields
