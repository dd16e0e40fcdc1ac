// UCX transport lists: UCX 1.13's transport names and aliases (ucp_context.c's ucp_tl_aliases).
#include "core/tls.h"

#include <algorithm>
#include <vector>

#include "core/strings.h"

namespace sluice::detail {
namespace {

// Every transport UCX 1.13 has, shared memory first.
constexpr std::string_view kTransports[] = {"self",      "tcp",      "sysv",      "posix",     "xpmem",    "cma",
                                            "knem",      "rc_verbs", "rc_mlx5",   "ud_verbs",  "ud_mlx5",  "dc_mlx5",
                                            "ugni_smsg", "ugni_udt", "ugni_rdma", "cuda_copy", "cuda_ipc", "gdr_copy",
                                            "rocm_copy", "rocm_ipc", "rocm_gdr"};

struct Alias {
  std::string_view name;
  std::vector<std::string_view> transports;  // auxiliary ones (UCX's ":aux") too
};
const Alias kAliases[] = {
    {"sm", {"posix", "sysv", "xpmem", "knem", "cma"}},
    {"shm", {"posix", "sysv", "xpmem", "knem", "cma"}},
    {"mm", {"posix", "sysv", "xpmem"}},
    {"ib", {"rc_verbs", "ud_verbs", "rc_mlx5", "ud_mlx5", "dc_mlx5"}},
    {"ud", {"ud_mlx5", "ud_verbs"}},
    {"ud_v", {"ud_verbs"}},
    {"ud_x", {"ud_mlx5"}},
    {"rc", {"rc_mlx5", "ud_mlx5", "rc_verbs", "ud_verbs"}},
    {"rc_v", {"rc_verbs", "ud_verbs"}},
    {"rc_x", {"rc_mlx5", "ud_mlx5"}},
    {"dc", {"dc_mlx5", "ud_mlx5"}},
    {"dc_x", {"dc_mlx5", "ud_mlx5"}},
    {"ugni", {"ugni_smsg", "ugni_udt", "ugni_rdma"}},
    {"cuda", {"cuda_copy", "cuda_ipc", "gdr_copy"}},
    {"rocm", {"rocm_copy", "rocm_ipc", "rocm_gdr"}},
};

// Transports that carry messages between two processes of one host: shared memory and the
// networks (through the loopback or the adapter). cma and knem move only rendezvous payloads.
constexpr std::string_view kLocalCarriers[] = {"sysv",     "posix",   "xpmem",   "tcp",       "rc_verbs", "rc_mlx5",
                                               "ud_verbs", "ud_mlx5", "dc_mlx5", "ugni_smsg", "ugni_rdma"};
// Those every host has: what a "^" list must leave (the others it leaves only where they exist).
constexpr std::string_view kEveryHostCarriers[] = {"sysv", "posix", "tcp"};

// An item without UCX's decorations: a leading "\" (this transport, not an alias) and ":aux".
std::string_view base(std::string_view item) {
  if (!item.empty() && item.front() == '\\') item.remove_prefix(1);
  if (std::size_t colon = item.find(':'); colon != std::string_view::npos) item = item.substr(0, colon);
  return item;
}

bool is_transport(std::string_view name) {
  return std::find(std::begin(kTransports), std::end(kTransports), name) != std::end(kTransports);
}

const Alias* alias_of(std::string_view name) {
  for (const Alias& a : kAliases)
    if (a.name == name) return &a;
  return nullptr;
}

// Names joined with `sep` (Debian's abseil joins only its own string_view).
template <typename Names>
std::string join(const Names& names, const char* sep) {
  std::string out;
  bool first = true;
  for (std::string_view n : names) {
    out.append(first ? "" : sep).append(n);
    first = false;
  }
  return out;
}

std::string valid_names() {
  std::vector<std::string> aliases;
  for (const Alias& a : kAliases) {
    bool shared_memory = a.name == "sm" || a.name == "shm" || a.name == "mm";
    aliases.push_back(std::string(a.name) + (shared_memory ? " (" + join(a.transports, ",") + ")" : ""));
  }
  return "transports " + join(kTransports, ", ") + "; aliases " + join(aliases, ", ") + "; all; ^LIST for all but LIST";
}

}  // namespace

TlsList::TlsList(std::string_view text) {
  std::string all = lower(trim(text));
  if (all.empty()) return;
  std::string_view rest(all);
  if (rest.front() == '^') {
    exclude_ = true;
    rest.remove_prefix(1);
  }
  for (std::string_view item : split(rest, ',')) items_.emplace_back(trim(item));
}

bool TlsList::any() const { return !exclude_ && (items_.empty() || (items_.size() == 1 && items_[0] == "all")); }

bool TlsList::may_use(std::string_view transport) const {
  if (any()) return true;
  bool named = false;
  for (const std::string& item : items_) {
    std::string_view name = base(item);
    const Alias* alias = alias_of(name);
    named =
        named || name == transport ||
        (alias && std::find(alias->transports.begin(), alias->transports.end(), transport) != alias->transports.end());
  }
  return named != exclude_;
}

bool TlsList::names(std::string_view transport) const {
  return std::any_of(items_.begin(), items_.end(), [&](const std::string& i) { return base(i) == transport; });
}

TlsList TlsList::without(std::string_view transport) const {
  TlsList out;
  out.exclude_ = true;
  if (any()) {
    out.items_ = {std::string(transport)};
  } else if (exclude_) {
    out.items_ = items_;
    if (!names(transport)) out.items_.emplace_back(transport);
  } else {
    for (const std::string& item : items_)
      if (base(item) != transport) out.items_.push_back(item);
    out.exclude_ = out.items_.empty();
    if (out.exclude_) out.items_ = {std::string(transport)};
  }
  return out;
}

std::string TlsList::str() const { return (exclude_ ? "^" : "") + join(items_, ","); }

absl::Status TlsList::check() const {
  if (any()) return absl::OkStatus();
  for (const std::string& item : items_) {
    std::string_view name = base(item);
    if (name.empty()) return absl::InvalidArgumentError("an empty transport name (two commas, or one at an end)");
    if (name == "all") return absl::InvalidArgumentError("'all' stands alone, it does not go in a list");
    if (!is_transport(name) && alias_of(name) == nullptr) {
      return absl::InvalidArgumentError("'" + item + "' is not a UCX transport or alias; valid: " + valid_names());
    }
  }
  auto usable = [&](std::string_view t) { return may_use(t); };
  bool reached = exclude_ ? std::any_of(std::begin(kEveryHostCarriers), std::end(kEveryHostCarriers), usable)
                          : std::any_of(std::begin(kLocalCarriers), std::end(kLocalCarriers), usable);
  if (!reached) {
    return absl::InvalidArgumentError(
        "leaves processes on the same host without shared memory to send through (nor tcp or an RDMA "
        "transport): cma and knem move only large payloads, self only within a process; add shm (or sysv, "
        "posix), or tcp for TCP loopback");
  }
  return absl::OkStatus();
}

bool auto_ucx_tcp(std::string_view given, int size, int local_size) {
  if (size <= 1) return false;
  const TlsList list(given);
  return local_size != size || (!list.excludes() && list.names("tcp"));
}

}  // namespace sluice::detail
