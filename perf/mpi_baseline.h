// sluice-perf's Open MPI baseline (--baseline mpi). The driving rank runs sluice-perf-mpi (the
// program beside sluice-perf, built where meson finds MPI) as a two-rank mpirun job, once per
// repetition and pml, and reads the line its rank 0 prints; the other ranks sleep in their
// engines meanwhile, so the job has the cores. One MPI_Init picks one pml: each pml is a job.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <sluice/status.h>

#include "options.h"
#include "report.h"

namespace sluice::perf {

struct Test;  // tests.h
struct Cmd;   // rows.h

// The pmls the baseline runs: ob1 over shared memory (btl self,vader), and ucx.
enum class Pml { kOb1, kUcx };
inline constexpr Pml kPmls[] = {Pml::kOb1, Pml::kUcx};
// "ob1" or "ucx".
const char* pml_name(Pml pml);

class MpiBaseline {
 public:
  explicit MpiBaseline(const Options& o);

  // One job: `t`'s pattern as `c` sizes it, under `pml`; `idle` runs every 10 ms or so while it
  // does (the driver keeps its engine answering). The figures, or FailedPrecondition saying
  // plainly why there are none ("pml ucx did not run: ..."). A pml that failed once fails at
  // once from then on, with the same message: its jobs are not started again.
  absl::StatusOr<Figures> run(const Test& t, const Cmd& c, Pml pml, const std::function<void()>& idle);
  // How long one job may take before it is killed.
  std::chrono::seconds timeout() const { return timeout_; }

 private:
  // mpirun's command line for a job.
  std::vector<std::string> command(const Test& t, const Cmd& c, Pml pml) const;
  absl::StatusOr<Figures> start(const Test& t, const Cmd& c, Pml pml, const std::function<void()>& idle);

  std::string mpirun_;   // --mpirun, found on PATH ("" when it is not there)
  std::string program_;  // sluice-perf-mpi beside this program ("" when it is not there)
  std::string missing_;  // why there is no job to run, when one of them is missing
  std::chrono::seconds timeout_;
  int offset_;
  std::optional<absl::Status> failed_[2];  // per pml
};

// What a job printed and how it ended, for run() and its tests.
struct ChildOutput {
  std::string output;  // its stdout and stderr, interleaved
  int status = -1;     // waitpid's
  bool timed_out = false;
};
// Runs `argv` with `env`, in a process group of its own, on every CPU this machine has (the
// launcher's binding of this process is not the job's), its output collected. Past `timeout`
// the group gets SIGTERM, then SIGKILL. `idle` runs between reads, every 10 ms at most apart.
ChildOutput run_child(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                      std::chrono::seconds timeout, const std::function<void()>& idle);

}  // namespace sluice::perf
