#include "job_stats.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "common/counter_table.h"
#include "common/stats_line.h"
#include "hosts.h"

namespace sluice::run {
namespace {

// 16 random bytes in hex: a name nobody can have made before us.
std::optional<std::string> random_tag() {
  unsigned char buf[16];
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  bool ok = fd >= 0 && ::read(fd, buf, sizeof buf) == static_cast<ssize_t>(sizeof buf);
  if (fd >= 0) ::close(fd);
  if (!ok) return std::nullopt;
  std::string out;
  for (unsigned char c : buf) {
    out += "0123456789abcdef"[c >> 4];
    out += "0123456789abcdef"[c & 15];
  }
  return out;
}

// A rank's file here, at most kMaxRankStats bytes of it; none is no lines.
Gathered read_file(const std::string& path) {
  Gathered g;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return g;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0 && g.text.size() <= kMaxRankStats)
    g.text.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  if (g.text.size() > kMaxRankStats) g.error = "more than " + std::to_string(kMaxRankStats) + " bytes of counters";
  return g;
}

// Adds up the counters of the exit lines of `text` into `sum` (`any`: there was one); the
// reason when a line is not a stats line.
std::string sum_exit_lines(const std::string& text, std::map<std::string, unsigned long long>* sum, bool* any) {
  std::size_t start = 0;
  for (int lineno = 1; start < text.size(); ++lineno) {
    std::size_t nl = text.find('\n', start);
    std::string_view line = std::string_view(text).substr(start, nl == std::string::npos ? nl : nl - start);
    start = nl == std::string::npos ? text.size() : nl + 1;
    if (line.empty()) continue;
    std::string pos = "line " + std::to_string(lineno) + ": ";
    if (line.size() > tools::kMaxStatsLine)
      return pos + "longer than " + std::to_string(tools::kMaxStatsLine) + " bytes";
    std::string why;
    auto parsed = tools::parse_stats_line(line, &why);
    if (!parsed) return pos + "not a stats line: " + tools::printable(why);
    if (parsed->trigger != "exit") continue;
    *any = true;
    for (const auto& [name, v] : parsed->counters) (*sum)[name] += v;
  }
  return {};
}

}  // namespace

std::optional<JobStats> JobStats::create() {
  auto tag = random_tag();
  char templ[] = "/tmp/sluice-stats.XXXXXX";
  if (!tag || ::mkdtemp(templ) == nullptr) {
    std::fprintf(stderr, "sluice-run: --stats: cannot make a directory for the counters: %s\n", std::strerror(errno));
    return std::nullopt;
  }
  return JobStats(templ, *tag);
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

std::vector<std::pair<std::string, std::string>> JobStats::rank_env(int rank, bool here) const {
  std::string file = here ? file_of(rank) : remote_dir(rank) + "/stats.jsonl";
  return {{"SLUICE_STATS_TRIGGER", "exit"}, {"SLUICE_STATS_DEST", "file:" + file}};
}

std::string JobStats::remote_prepare(int rank) const {
  // mkdir fails on a name that exists: the rank never writes into a directory of another's.
  return "mkdir -m 700 " + shell_quote(remote_dir(rank)) + " || exit 1; ";
}

std::string JobStats::remote_collect(int rank) const {
  // A regular file only, bounded here too, so that the directory goes whatever the rank left.
  return "d=" + shell_quote(remote_dir(rank)) +
         "; if [ -d \"$d\" ] && [ ! -L \"$d\" ] && [ -O \"$d\" ]; then"
         " [ -f \"$d/stats.jsonl\" ] && head -c " +
         std::to_string(kMaxRankStats + 1) + " \"$d/stats.jsonl\"; rm -rf \"$d\"; fi; exit 0";
}

void JobStats::print(FILE* out, const std::vector<std::optional<Gathered>>& remote) const {
  std::vector<tools::CounterSource> sources;
  std::vector<long long> missing;
  for (std::size_t r = 0; r < remote.size(); ++r) {
    Gathered g = remote[r] ? *remote[r] : read_file(file_of(static_cast<int>(r)));
    std::map<std::string, unsigned long long> mine;
    bool any = false;
    std::string why = g.error.empty() ? sum_exit_lines(g.text, &mine, &any) : g.error;
    if (!why.empty()) {
      std::fprintf(out, "sluice-run: --stats: rank %zu: %s; its counters are left out\n", r, why.c_str());
    } else if (!any) {
      missing.push_back(static_cast<long long>(r));
    } else {
      sources.push_back({"rank " + std::to_string(r), std::move(mine)});
    }
  }
  std::fprintf(out, "sluice-run: counters of %zu of %zu ranks (each rank's engines at exit):\n", sources.size(),
               remote.size());
  tools::print_counter_table(out, sources);
  if (!missing.empty())
    std::fprintf(out, "sluice-run: --stats: rank(s) %s wrote no counters (no engine closed in order)\n",
                 tools::list_ranks(missing).c_str());
}

}  // namespace sluice::run
