#include "job_stats.h"

#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace sluice::run {

std::optional<JobStats> JobStats::create() {
  char templ[] = "/tmp/sluice-stats.XXXXXX";
  if (::mkdtemp(templ) == nullptr) {
    std::fprintf(stderr, "sluice-run: --stats: cannot make a directory for the counters: %s\n", std::strerror(errno));
    return std::nullopt;
  }
  return JobStats(templ);
}

JobStats::~JobStats() {
  if (dir_.empty()) return;
  if (DIR* d = ::opendir(dir_.c_str())) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ::unlink((dir_ + "/" + e->d_name).c_str());
    ::closedir(d);
  }
  ::rmdir(dir_.c_str());
}

std::vector<std::pair<std::string, std::string>> JobStats::rank_env(int rank) const {
  return {{"SLUICE_STATS_TRIGGER", "exit"}, {"SLUICE_STATS_DEST", "file:" + file_of(rank)}};
}

std::map<std::string, unsigned long long> counters_of_line(const std::string& line) {
  std::map<std::string, unsigned long long> out;
  std::size_t at = line.find("\"counters\": {");
  if (at == std::string::npos) return out;
  std::size_t end = line.find('}', at);
  for (std::size_t q = line.find('"', at + 13); q < end; q = line.find('"', q)) {
    std::size_t close = line.find('"', q + 1);
    if (close == std::string::npos || close > end) break;
    std::string name = line.substr(q + 1, close - q - 1);
    char* after = nullptr;
    unsigned long long v = std::strtoull(line.c_str() + close + 2, &after, 10);  // past the ':'
    out[name] = v;
    q = static_cast<std::size_t>(after - line.c_str());
  }
  return out;
}

namespace {

struct Spread {
  unsigned long long sum = 0, min = 0, max = 0;
  int min_rank = -1, max_rank = -1;
  void add(int rank, unsigned long long v) {
    sum += v;
    if (min_rank < 0 || v < min) min = v, min_rank = rank;
    if (max_rank < 0 || v > max) max = v, max_rank = rank;
  }
};

}  // namespace

void JobStats::print(FILE* out, const std::vector<bool>& here) const {
  // Per rank, the sum over its engines' exit lines; then, per counter, over the ranks.
  std::map<std::string, Spread> job;
  std::vector<int> missing, elsewhere;
  std::vector<std::map<std::string, unsigned long long>> per_rank;
  std::vector<int> gathered;
  for (int r = 0; r < static_cast<int>(here.size()); ++r) {
    if (!here[static_cast<std::size_t>(r)]) {
      elsewhere.push_back(r);
      continue;
    }
    std::ifstream in(file_of(r));
    std::map<std::string, unsigned long long> mine;
    bool any = false;
    for (std::string line; std::getline(in, line);) {
      if (line.find("\"trigger\": \"exit\"") == std::string::npos) continue;
      any = true;
      for (const auto& [name, v] : counters_of_line(line)) mine[name] += v;
    }
    if (!any) {
      missing.push_back(r);
      continue;
    }
    per_rank.push_back(std::move(mine));
    gathered.push_back(r);
  }
  // A counter one rank lacks counts 0 there.
  for (const auto& m : per_rank)
    for (const auto& kv : m) job[kv.first];
  for (std::size_t i = 0; i < per_rank.size(); ++i)
    for (auto& [name, s] : job) {
      auto it = per_rank[i].find(name);
      s.add(gathered[i], it == per_rank[i].end() ? 0 : it->second);
    }
  std::fprintf(out, "sluice-run: counters of %zu of %zu ranks (each rank's engines at exit):\n", gathered.size(),
               here.size());
  std::fprintf(out, "  %-40s %16s %16s %-9s %16s %s\n", "counter", "sum", "min", "(rank)", "max", "(rank)");
  int zero = 0;
  for (const auto& [name, s] : job) {
    if (s.max == 0) {
      ++zero;
      continue;
    }
    std::fprintf(out, "  %-40s %16llu %16llu (rank %d) %16llu (rank %d)\n", name.c_str(), s.sum, s.min, s.min_rank,
                 s.max, s.max_rank);
  }
  if (zero > 0) std::fprintf(out, "  (%d more counters are 0 on every rank)\n", zero);
  auto list = [](const std::vector<int>& ranks) {
    std::string s;
    for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
    return s;
  };
  if (!missing.empty())
    std::fprintf(out, "sluice-run: --stats: rank(s) %s wrote no counters (no engine closed in order)\n",
                 list(missing).c_str());
  if (!elsewhere.empty())
    std::fprintf(out, "sluice-run: --stats: rank(s) %s ran on other hosts and are not gathered\n",
                 list(elsewhere).c_str());
}

}  // namespace sluice::run
