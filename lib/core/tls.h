// UCX transport lists (SLUICE_TLS, UCX_TLS) read as UCX 1.13 reads them (internal).
//
// A list names transports (sysv, posix, cma, tcp, ...) or UCX's aliases for groups of them
// (sm and shm: every shared-memory transport; mm: sysv, posix and xpmem; ib, rc, ud, ...);
// "^" in front means every transport but these; empty or "all" leaves the choice to UCX.
// Sluice decides from the expanded list which of UCX's shared-memory settings to make.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <sluice/status.h>

namespace sluice::detail {

class TlsList {
 public:
  // Splits `text` at commas (items trimmed and lowercased). Never fails: check() says what is
  // wrong, and a list of the user's UCX_TLS goes to UCX as given.
  explicit TlsList(std::string_view text);

  // No list: UCX's own choice (empty or "all").
  bool any() const;
  // A "^" list: every transport but those named.
  bool excludes() const { return exclude_; }
  // Whether UCX may use `transport` under this list: named itself or through an alias, or,
  // in a "^" list, not named.
  bool may_use(std::string_view transport) const;
  // Whether `transport` is one of the items as written (not through an alias).
  bool names(std::string_view transport) const;
  // The list without `transport`: taken out of a list of names, added to a "^" list;
  // UCX's own choice, or a list of that transport alone, becomes "^transport".
  TlsList without(std::string_view transport) const;
  // The list as UCX_TLS takes it ("" for UCX's own choice given as "").
  std::string str() const;

  // For SLUICE_TLS: every item is a UCX transport or alias, and the list leaves processes on
  // one host a way to reach each other (shared memory or a network transport; cma and knem
  // move only large payloads). The error is the reason alone, with the valid names.
  absl::Status check() const;

 private:
  TlsList() = default;
  bool exclude_ = false;
  std::vector<std::string> items_;
};

// SLUICE_UCX_TCP=auto: whether UCX's TCP transport may be used by a job of `size` ranks,
// `local_size` of them on this host (0: not known), under the list `given` (SLUICE_TLS, else
// UCX_TLS). Where some rank may be elsewhere, or the list names tcp itself; not with one rank
// (client/server mode). A job on one host needs no TCP between its ranks, and UCX's TCP
// listens on every interface and keeps UCX's own polling that empty datagrams abort.
bool auto_ucx_tcp(std::string_view given, int size, int local_size);

}  // namespace sluice::detail
