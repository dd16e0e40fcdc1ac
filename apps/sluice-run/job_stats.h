// sluice-run --stats: each rank's engines write their counters at exit (SLUICE_STATS_TRIGGER=exit)
// to a file of the launcher's job directory; at the end the launcher prints, per counter, the
// job's sum and which rank had the least and the most.
#pragma once

#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace sluice::run {

class JobStats {
 public:
  // A fresh private directory (/tmp/sluice-stats.XXXXXX); nullopt after a message on stderr.
  static std::optional<JobStats> create();
  JobStats(JobStats&& other) noexcept : dir_(std::move(other.dir_)) { other.dir_.clear(); }
  JobStats(const JobStats&) = delete;
  ~JobStats();  // removes the directory and its files

  // What rank `rank` (on this machine) gets in its environment.
  std::vector<std::pair<std::string, std::string>> rank_env(int rank) const;

  // Reads every rank's lines and prints the table to `out`; `here[r]` says whether rank r ran
  // on this machine (ranks elsewhere write no file here, and are named as not gathered).
  void print(FILE* out, const std::vector<bool>& here) const;

 private:
  explicit JobStats(std::string dir) : dir_(std::move(dir)) {}
  std::string file_of(int rank) const { return dir_ + "/rank-" + std::to_string(rank) + ".jsonl"; }
  std::string dir_;
};

// The counters of one JSON stats line ({"counters": {"name": value, ...}, ...}); empty when
// the line has none.
std::map<std::string, unsigned long long> counters_of_line(const std::string& line);

}  // namespace sluice::run
