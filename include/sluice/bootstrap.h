// sluice/bootstrap.h — how the ranks of a job find each other.
//
// A Bootstrap gives a process its rank and the job size, and an exchange: put() some values,
// fence() (a barrier that makes every rank's puts visible to all), then get() any rank's
// values. Engines publish their worker addresses this way; endpoints are then created lazily.
//
// Implementations: PMIx (under Open MPI's mpirun or Slurm's srun --mpi=pmix), sluice-run's
// bootstrap service, a shared directory (SLUICE_BOOT=file:PATH), a single rank, and an
// in-process group for tests. make_bootstrap() picks one as SLUICE_BOOT says.
//
// Threads: one thread at a time per Bootstrap object. fence() is collective: every rank must
// call it the same number of times. Every call waits at most SLUICE_CONNECT_TIMEOUT and then
// fails with DeadlineExceeded naming what it waited for.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <sluice/api.h>
#include <sluice/config.h>
#include <sluice/status.h>

namespace sluice {

class SLUICE_API Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Publishes `value` under `key` for the other ranks, visible after the next fence().
  virtual absl::Status put(std::string_view key, std::string_view value) = 0;
  // Barrier plus exchange of everything put so far.
  virtual absl::Status fence() = 0;
  // A value `rank` put before the last fence. NotFound when it put none under `key`.
  virtual absl::StatusOr<std::string> get(int rank, std::string_view key) = 0;
  // "pmix", "sluice-run", "file", "single", "in-process".
  virtual std::string name() const = 0;
  // How many of the job's ranks run on this host, as the launcher says (PMIx's local size,
  // SLUICE_LOCAL_SIZE); 0 when it does not say. Equal to size(), the job is on one host: a
  // Context then leaves UCX's TCP transport out (SLUICE_UCX_TCP=auto).
  virtual int local_size() const { return 0; }
};

// The bootstrap SLUICE_BOOT selects: auto tries PMIx (PMIX_RANK and PMIX_NAMESPACE set), then
// sluice-run (SLUICE_BOOT_ADDR set), then a single rank.
SLUICE_API absl::StatusOr<std::unique_ptr<Bootstrap>> make_bootstrap(const Config& config);

// `n` bootstraps for `n` ranks in one process (one per thread), for tests and for several
// engines in one program.
SLUICE_API std::vector<std::unique_ptr<Bootstrap>> make_in_process_group(int n);

}  // namespace sluice
