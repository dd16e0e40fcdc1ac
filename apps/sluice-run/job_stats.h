// sluice-run --stats: each rank's engines write their counters at exit (SLUICE_STATS_TRIGGER=exit)
// to a file of a directory of the rank's own: here, in the launcher's private directory; on
// another host, in one the rank's command makes there (mkdir, which refuses a name that exists),
// whose lines the launch agent brings back after the job and which it then removes. At the end
// the launcher prints, per counter, the job's sum and which rank had the least and the most.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "gather.h"

namespace sluice::run {

// The most counters one rank may bring back: several engines' lines of some KiB each.
inline constexpr std::size_t kMaxRankStats = std::size_t{1} << 20;

class JobStats {
 public:
  // A fresh private directory (/tmp/sluice-stats.XXXXXX) and a random name for the
  // directories of ranks elsewhere; nullopt after a message on stderr.
  static std::optional<JobStats> create();
  JobStats(JobStats&& other) noexcept : dir_(std::move(other.dir_)), tag_(std::move(other.tag_)) { other.dir_.clear(); }
  JobStats(const JobStats&) = delete;
  ~JobStats();  // removes the directory and its files

  // What rank `rank` gets in its environment, `here` or on another host.
  std::vector<std::pair<std::string, std::string>> rank_env(int rank, bool here) const;
  // For a rank elsewhere, the shell commands that come first in its command line (make its
  // directory, or fail the rank), and the command that prints its lines and removes the
  // directory once it has exited.
  std::string remote_prepare(int rank) const;
  std::string remote_collect(int rank) const;

  // Reads every rank's lines (here: its file; elsewhere: `remote[r]`, what the launch agent
  // brought back) and prints the table to `out`, naming the ranks left out and why.
  void print(FILE* out, const std::vector<std::optional<Gathered>>& remote) const;

 private:
  JobStats(std::string dir, std::string tag) : dir_(std::move(dir)), tag_(std::move(tag)) {}
  std::string file_of(int rank) const { return dir_ + "/rank-" + std::to_string(rank) + ".jsonl"; }
  std::string remote_dir(int rank) const { return "/tmp/sluice-stats." + tag_ + ".rank-" + std::to_string(rank); }
  std::string dir_, tag_;
};

}  // namespace sluice::run
