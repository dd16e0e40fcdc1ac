// The declarative table of configuration variables (internal).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>

#include <sluice/config.h>

#include "core/process_env.h"

namespace sluice::detail {

// Every variable's home: the application's Config and the process's environment. A table
// entry's member pointer names a field of either base.
struct Settings : Config, ProcessEnv {};

// One SLUICE_* variable: {name, type, default, doc, parser, printer}. The parser stores the
// parsed value into the Settings; an error names only the reason (the caller adds the variable).
struct ConfigVarSpec {
  const char* name;
  const char* component;
  std::string type;
  const char* default_value;
  const char* doc;
  std::function<absl::Status(std::string_view, Settings&)> parse;
  std::function<std::string(const Settings&)> show;
  // A ProcessEnv field (launcher, testing): read from the environment even when the
  // application gives its own Config.
  bool process() const;
};

// All variables, grouped by component in declaration order.
std::span<const ConfigVarSpec> config_table();

// SLUICE_STATS_TRIGGER's list ("exit,signal:USR1,timer:5s", "none") and back.
absl::StatusOr<StatsTrigger> parse_stats_trigger(std::string_view text);
std::string format_stats_trigger(const StatsTrigger& t);

// The closest known variable name to `name` (edit distance), for "did you mean".
std::string closest_config_name(std::string_view name);

// Reads a variable from the scoped overrides, then the environment. The only getenv in Sluice.
std::optional<std::string> config_lookup(const char* name);

}  // namespace sluice::detail
