// What the environment says about this process (internal), as opposed to how the application
// wants Sluice to behave (the public Config): the launcher's variables (SLUICE_RANK, ...), the
// fault tests' SLUICE_FAULT_AT, and the UCX variables Sluice must not override. The library
// reads these itself, once per Context (and in make_bootstrap), even when the application
// passes a Config of its own.
#pragma once

#include <string>

#include <sluice/status.h>

namespace sluice::detail {

struct ProcessEnv {
  // set by sluice-run (or by hand with SLUICE_BOOT=file); -1 when absent
  int rank = -1;
  int size = -1;
  int local_rank = -1;
  int local_size = -1;  // ranks on this host
  std::string boot_addr;
  std::string boot_token;
  // SLUICE_FAULT_AT: a named fault point to die (or fail) at (fault tests)
  std::string fault_at;
  // UCX's shared-memory FIFO size was given (UCX_MM_FIFO_SIZE, UCX_SYSV_FIFO_SIZE or
  // UCX_POSIX_FIFO_SIZE): Sluice leaves it as given instead of deriving it from the credits.
  bool ucx_fifo_size_set = false;
  bool ucx_adaptive_progress_set = false;  // UCX_ADAPTIVE_PROGRESS was given: left as given
  std::string ucx_tls;                     // UCX_TLS as given: what SLUICE_TLS overrides
  std::string ucx_posix_dir;               // UCX_POSIX_DIR as given: where UCX's posix segments live (empty: /dev/shm)

  // Reads the launcher and testing variables of the configuration table (an error names the
  // variable, like Config::from_env) and the UCX ones; SLUICE_RANK must be below SLUICE_SIZE.
  static absl::StatusOr<ProcessEnv> from_env();
};

}  // namespace sluice::detail
