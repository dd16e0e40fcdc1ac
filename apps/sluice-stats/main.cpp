// sluice-stats: adds up the live stats lines Sluice programs wrote at exit, for jobs that
// sluice-run did not start (mpirun, srun), and prints the table sluice-run --stats prints.
//
//   sluice-stats FILE...   (usage() has the details)
//
// A rank's engines' exit lines are added up; a line without a rank counts for its host and
// process. Input is read a line at a time, each at most kMaxStatsLine bytes: a line that is
// longer or not a stats line stops the tool with a message naming its file and line.
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/counter_table.h"
#include "common/stats_line.h"

namespace {

using sluice::tools::printable;

void usage(FILE* out) {
  std::fprintf(
      out,
      "usage: sluice-stats FILE...\n"
      "Adds up the counters that the processes of a Sluice job wrote as live stats lines\n"
      "when their engines were destroyed (SLUICE_STATS_TRIGGER=exit,\n"
      "SLUICE_STATS_DEST=file:PATH) and prints, per counter, the sum over the job's ranks\n"
      "and the ranks with the least and the most: the table sluice-run --stats prints, for\n"
      "jobs mpirun or srun started. Each rank's engines' exit lines are added up; lines of other triggers are\n"
      "skipped; a line without a rank counts for its host and process id. FILE - is the\n"
      "standard input.\n"
      "\n"
      "options:\n"
      "  -h, --help      print this help\n"
      "\n"
      "exit status:\n"
      "  0               the table was printed\n"
      "  1               a file cannot be read, a line is not a stats line (or is longer than\n"
      "                  256 KiB), one rank's lines come from two processes, or there is no\n"
      "                  exit line; the message names the file and line\n"
      "  2               bad arguments\n"
      "\n"
      "examples:\n"
      "  mpirun -np 4 -x SLUICE_STATS_TRIGGER=exit -x SLUICE_STATS_DEST=file:$PWD/stats/%%h-%%p.jsonl ./app\n"
      "  sluice-stats stats/*.jsonl\n");
}

// The job's processes so far: a rank's by its number, the others' by host and pid.
struct Job {
  std::map<std::pair<long long, std::string>, sluice::tools::CounterSource> sources;
  std::map<long long, std::pair<std::string, std::string>> process_of_rank;  // "host:pid", where first seen
  bool any_exit = false;
};

// Adds one exit line; false after a message when its rank's lines came from another process.
bool add_line(Job& job, const sluice::tools::StatsLine& line, const std::string& where) {
  std::string process = line.host + ":" + std::to_string(line.pid);
  std::pair<long long, std::string> key{line.rank, ""};
  std::string label = "rank " + std::to_string(line.rank);
  if (line.rank < 0) {
    key = {LLONG_MAX, process};
    label = printable(process);
  } else {
    auto [it, fresh] = job.process_of_rank.try_emplace(line.rank, process, where);
    if (!fresh && it->second.first != process) {
      std::fprintf(stderr,
                   "sluice-stats: %s: rank %lld of process %s, but %s had rank %lld of process %s: "
                   "give the files of one job\n",
                   where.c_str(), line.rank, printable(process).c_str(), it->second.second.c_str(), line.rank,
                   printable(it->second.first).c_str());
      return false;
    }
  }
  auto& source = job.sources[key];
  source.label = label;
  for (const auto& [name, v] : line.counters) source.counters[name] += v;
  job.any_exit = true;
  return true;
}

// Reads one file's lines into `job`; false after a message naming the file and line.
bool read_file(const std::string& path, Job& job) {
  FILE* in = path == "-" ? stdin : std::fopen(path.c_str(), "re");
  if (in == nullptr) {
    std::fprintf(stderr, "sluice-stats: %s: cannot open it: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  std::string line, why;
  bool too_long = false, ok = true;
  for (long lineno = 1; ok && sluice::tools::next_line(in, &line, &too_long); ++lineno) {
    std::string where = path + ":" + std::to_string(lineno);
    if (too_long) {
      std::fprintf(stderr, "sluice-stats: %s: a line longer than %zu bytes; not a stats line\n", where.c_str(),
                   sluice::tools::kMaxStatsLine);
      ok = false;
    } else if (!line.empty()) {
      auto parsed = sluice::tools::parse_stats_line(line, &why);
      if (!parsed)
        std::fprintf(stderr, "sluice-stats: %s: not a stats line: %s\n", where.c_str(), printable(why).c_str());
      ok = parsed && (parsed->trigger != "exit" || add_line(job, *parsed, where));
    }
  }
  if (ok && std::ferror(in)) {
    std::fprintf(stderr, "sluice-stats: %s: cannot read it: %s\n", path.c_str(), std::strerror(errno));
    ok = false;
  }
  if (in != stdin) std::fclose(in);
  return ok;
}

void print(const Job& job, std::size_t files) {
  std::vector<sluice::tools::CounterSource> sources;
  std::vector<long long> ranks_missing;
  long long next_rank = 0;
  for (const auto& [key, source] : job.sources) {
    for (; key.first != LLONG_MAX && next_rank < key.first; ++next_rank) ranks_missing.push_back(next_rank);
    if (key.first != LLONG_MAX) next_rank = key.first + 1;
    sources.push_back(source);
  }
  std::size_t ranks = job.process_of_rank.size(), others = sources.size() - ranks;
  std::string whose = std::to_string(ranks) + " ranks (each rank's engines at exit)";
  if (others > 0)
    whose = std::to_string(ranks) + " ranks and " + std::to_string(others) +
            " other processes (each one's engines at exit)";
  std::printf("sluice-stats: counters of %s, from %zu file(s):\n", whose.c_str(), files);
  sluice::tools::print_counter_table(stdout, sources);
  if (!ranks_missing.empty())
    std::printf("sluice-stats: rank(s) %s wrote no exit line (no engine closed in order, or their file is not given)\n",
                sluice::tools::list_ranks(ranks_missing).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    }
    if (a.size() > 1 && a[0] == '-') {
      std::fprintf(stderr, "sluice-stats: unknown option %s\n", argv[i]);
      usage(stderr);
      return 2;
    }
    files.emplace_back(a);
  }
  if (files.empty()) {
    std::fprintf(stderr, "sluice-stats: need the files of the stats lines\n");
    usage(stderr);
    return 2;
  }
  Job job;
  for (const auto& f : files)
    if (!read_file(f, job)) return 1;
  if (!job.any_exit) {
    std::fprintf(stderr, "sluice-stats: no exit line (SLUICE_STATS_TRIGGER=exit) in the files given\n");
    return 1;
  }
  print(job, files.size());
  return 0;
}
