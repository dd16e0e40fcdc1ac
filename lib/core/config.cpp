// Config::from_env, cross-field validation, scoped overrides, unknown-variable warnings.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include <absl/strings/str_format.h>

#include "core/config_table.h"
#include "core/log.h"
#include "core/tls.h"

extern char** environ;

namespace sluice {
namespace detail {
namespace {

std::mutex g_override_mutex;
// name -> value; a mapped nullopt means "reads as unset".
std::map<std::string, std::optional<std::string>>& overrides() {
  static std::map<std::string, std::optional<std::string>> map;
  return map;
}

// Every SLUICE_* name present in the environment or the overrides.
std::set<std::string> present_names() {
  std::set<std::string> names;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    if (kv.rfind("SLUICE_", 0) != 0) continue;
    names.emplace(kv.substr(0, kv.find('=')));
  }
  std::lock_guard lock(g_override_mutex);
  for (auto& [name, value] : overrides()) {
    if (value) names.insert(name);
    else names.erase(name);
  }
  return names;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// Variables that were renamed: setting the old name is an error that names the new one, so a
// setting is never silently ignored.
struct Renamed {
  const char* old_name;
  const char* new_name;
};
constexpr Renamed kRenamed[] = {{"SLUICE_RPC_SLOTS", "SLUICE_RPC_WINDOW"}};

const Renamed* renamed(std::string_view name) {
  for (const Renamed& r : kRenamed)
    if (name == r.old_name) return &r;
  return nullptr;
}

void warn_unknown_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const std::string& name : present_names()) {
      if (const Renamed* r = renamed(name)) {
        SLUICE_LOG(kWarn, "config", "%s was renamed %s; set that instead", name, r->new_name);
        continue;
      }
      bool known = false;
      for (const auto& v : config_table()) known = known || name == v.name;
      if (!known) {
        SLUICE_LOG(kWarn, "config", "unknown variable %s (did you mean %s?)", name, closest_config_name(name));
      }
    }
  });
}

}  // namespace

std::optional<std::string> config_lookup(const char* name) {
  {
    std::lock_guard lock(g_override_mutex);
    auto it = overrides().find(name);
    if (it != overrides().end()) return it->second;
  }
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

std::string closest_config_name(std::string_view name) {
  std::string best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const auto& v : config_table()) {
    std::size_t d = edit_distance(name, v.name);
    if (d < best_d) {
      best_d = d;
      best = v.name;
    }
  }
  return best;
}

}  // namespace detail

namespace detail {
namespace {

// Reads the table's variables (all of them, or only the process's) into `s`.
absl::Status read_table(Settings& s, bool process_only) {
  warn_unknown_once();
  for (const Renamed& r : kRenamed) {
    if (process_only || !config_lookup(r.old_name)) continue;
    return absl::InvalidArgumentError(
        absl::StrFormat("%s was renamed %s: set that instead (same meaning)", r.old_name, r.new_name));
  }
  for (const auto& var : config_table()) {
    if (process_only && !var.process()) continue;
    std::optional<std::string> value = config_lookup(var.name);
    if (!value) continue;
    absl::Status st = var.parse(*value, s);
    if (!st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s=%s: %s; allowed: %s", var.name, *value, st.message(), var.type));
    }
  }
  for (const char* ucx : {"UCX_MM_FIFO_SIZE", "UCX_SYSV_FIFO_SIZE", "UCX_POSIX_FIFO_SIZE"})
    if (config_lookup(ucx)) s.ucx_fifo_size_set = true;
  s.ucx_adaptive_progress_set = config_lookup("UCX_ADAPTIVE_PROGRESS").has_value();
  s.ucx_tls = config_lookup("UCX_TLS").value_or("");
  s.ucx_posix_dir = config_lookup("UCX_POSIX_DIR").value_or("");
  if (s.rank >= 0 && s.size >= 0 && s.rank >= s.size) {
    return absl::InvalidArgumentError(absl::StrFormat("SLUICE_RANK=%d is not below SLUICE_SIZE=%d", s.rank, s.size));
  }
  if (s.local_size > 0 && s.size >= 0 && s.local_size > s.size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SLUICE_LOCAL_SIZE=%d is above SLUICE_SIZE=%d", s.local_size, s.size));
  }
  if (s.rank >= 0) set_log_rank(s.rank);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ProcessEnv> ProcessEnv::from_env() {
  Settings s;
  SLUICE_RETURN_IF_ERROR(read_table(s, true));
  return static_cast<ProcessEnv&>(s);
}

}  // namespace detail

absl::StatusOr<Config> Config::from_env() {
  detail::Settings s;
  SLUICE_RETURN_IF_ERROR(detail::read_table(s, false));
  Config& config = s;
  detail::set_log_level(config.log_level);
  SLUICE_RETURN_IF_ERROR(config.validate());
  return config;
}

AuthMode Config::auth_mode() const {
  if (auth != AuthMode::kAuto) return auth;
  return auth_key_file.empty() ? AuthMode::kOff : AuthMode::kRequired;
}

std::size_t Config::eager_limit() const {
  // auto: UCX 1.13 switches from eager copy to rendezvous at 8256 B on shared memory
  // (sysv + cma) and 8185 B on TCP (docs/flow-control.md); 8 KiB sits just below both.
  return eager_max.value_or(std::size_t{8} << 10);
}

absl::Status Config::validate() const {
  const std::size_t eager_slot = eager_limit() + 64;  // wire header room, see lib/wire
  if (recv_pool_max < eager_slot) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SLUICE_RECV_POOL_MAX=%s is smaller than one eager slot (%s, from SLUICE_EAGER_MAX)",
                        format_size(recv_pool_max), format_size(eager_slot)));
  }
  if (send_pool_max < eager_slot) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SLUICE_SEND_POOL_MAX=%s is smaller than one eager slot (%s, from SLUICE_EAGER_MAX)",
                        format_size(send_pool_max), format_size(eager_slot)));
  }
  for (std::size_t cls : pool_classes) {
    if (cls <= eager_limit()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("SLUICE_POOL_CLASSES has %s, not above the eager limit SLUICE_EAGER_MAX=%s", format_size(cls),
                          format_size(eager_limit())));
    }
  }
  if (heartbeat >= peer_timeout && peer_timeout != kInfinite) {
    return absl::InvalidArgumentError(absl::StrFormat("SLUICE_HEARTBEAT=%s must be shorter than SLUICE_PEER_TIMEOUT=%s",
                                                      format_duration(heartbeat), format_duration(peer_timeout)));
  }
  if (absl::Status st = detail::TlsList(tls).check(); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat("SLUICE_TLS=%s: %s", tls, st.message()));
  }
  if ((auth == AuthMode::kRequired || auth == AuthMode::kOptional) && auth_key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SLUICE_AUTH=%s needs a key: set SLUICE_AUTH_KEY_FILE (sluice-info --new-key FILE writes one)",
                        auth == AuthMode::kRequired ? "required" : "optional"));
  }
  if (encrypt == Encrypt::kOn && (auth_key_file.empty() || auth_mode() == AuthMode::kOff)) {
    return absl::InvalidArgumentError(
        "SLUICE_ENCRYPT=on needs the shared key its session keys come from: set SLUICE_AUTH_KEY_FILE (and not "
        "SLUICE_AUTH=off)");
  }
  return absl::OkStatus();
}

std::vector<ConfigVar> describe(const Config& config) {
  detail::Settings s;
  static_cast<Config&>(s) = config;
  static_cast<detail::ProcessEnv&>(s) = detail::ProcessEnv::from_env().value_or(detail::ProcessEnv{});
  std::vector<ConfigVar> out;
  for (const auto& v : detail::config_table()) {
    out.push_back({v.name, v.component, v.type, v.default_value, v.doc, v.show(s)});
  }
  return out;
}

ScopedConfigOverride::ScopedConfigOverride(std::string name, std::optional<std::string> value)
    : name_(std::move(name)) {
  std::lock_guard lock(detail::g_override_mutex);
  auto& map = detail::overrides();
  auto it = map.find(name_);
  had_previous_ = it != map.end();
  if (had_previous_) previous_ = it->second;
  map[name_] = std::move(value);
}

ScopedConfigOverride::~ScopedConfigOverride() {
  std::lock_guard lock(detail::g_override_mutex);
  auto& map = detail::overrides();
  if (had_previous_) map[name_] = previous_;
  else map.erase(name_);
}

}  // namespace sluice
