#include "rows.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include <sluice/config.h>

#include "tests.h"

namespace sluice::perf {
namespace {

using Clock = std::chrono::steady_clock;

// The baseline column's name: --baseline's, or the test's own.
std::string baseline_name(const Test& t, const Options& o) {
  switch (t.baseline) {
    case Baseline::kChosen: return o.baseline;
    case Baseline::kEngineAlone: return "engine";
    case Baseline::kIdle: return "idle";
    case Baseline::kBudget: return "budget";
    case Baseline::kSolo: return "solo";
  }
  return o.baseline;
}

// A row's plan: its iterations, window and baseline as the test and the options say.
Row plan(const Options& o, const Test& t, std::size_t size) {
  int iters = o.iters ? o.iters : default_iters(t, size);
  int window = t.takes_window && o.window ? o.window : t.window;
  return Row{t.name, size, iters, window, {}, {}, baseline_name(t, o), NAN, "", o.mode, {}};
}

// What runs the baseline of `t`'s row, with `c` the Sluice run's command; false: nothing.
// mixed's is the same small calls as rpc_lat's, with the streams off.
bool baseline_cmd(const Options& o, const Test& t, Cmd* c) {
  switch (t.baseline) {
    case Baseline::kIdle: std::snprintf(c->test, sizeof(c->test), "rpc_lat"); return true;
    case Baseline::kEngineAlone: c->mode = RunOn::kEngineAlone; return true;
    case Baseline::kBudget: c->mode = RunOn::kRaw; return o.baseline == "ucx" && t.raw != nullptr;
    case Baseline::kSolo: return false;  // crowd's own (crowd.cpp)
    case Baseline::kChosen:
      c->mode = o.baseline == "ucx" ? RunOn::kRaw : RunOn::kBounce;
      return o.baseline == "ucx" || o.baseline == "bounce";
  }
  return false;
}

// The commands of a row's baselines, with `c` the Sluice run's: one, none, or with --baseline
// mpi one per pml (a job each).
std::vector<Cmd> baseline_cmds(const Options& o, const Test& t, const Cmd& c) {
  if (o.baseline == "mpi" && t.baseline == Baseline::kChosen && t.mpi != MpiPattern::kNone) {
    Cmd ob1 = c, ucx = c;
    ob1.mode = RunOn::kMpiOb1;
    ucx.mode = RunOn::kMpiUcx;
    return {ob1, ucx};
  }
  Cmd base = c;
  if (baseline_cmd(o, t, &base)) return {base};
  return {};
}

// Progress on stderr: rewritten in place on a terminal, a line every 10 s otherwise.
class Progress {
 public:
  void report(const Row& row, int rep, int repeats) {
    auto now = Clock::now();
    if (tty_ && now - started_ > std::chrono::seconds(3)) {
      std::fprintf(stderr, "\rsluice-perf: %s %s rep %d/%d   ", row.test.c_str(), sluice::format_size(row.size).c_str(),
                   rep + 1, repeats);
    } else if (!tty_ && now - last_ > std::chrono::seconds(10)) {
      last_ = now;
      std::fprintf(stderr, "sluice-perf: %s %s rep %d/%d\n", row.test.c_str(), sluice::format_size(row.size).c_str(),
                   rep + 1, repeats);
    }
  }
  void clear() {
    if (tty_ && Clock::now() - started_ > std::chrono::seconds(3)) std::fprintf(stderr, "\r%60s\r", "");
  }

 private:
  bool tty_ = isatty(2);
  Clock::time_point started_ = Clock::now();
  Clock::time_point last_ = started_;
};

// Runs one row -r times, Sluice and its baselines alternating, and returns it with its figures:
// a row per baseline (the pmls of --baseline mpi), or the one row. A baseline that fails is not
// run again; its row keeps no figures and says why.
std::vector<Row> run_row(const Options& o, const Test& t, const Row& planned, Progress& progress, const Drive& drive) {
  Cmd c{};
  std::snprintf(c.test, sizeof(c.test), "%s", t.name);
  c.size = planned.size;
  c.iters = planned.iters;
  c.warmup = o.warmup >= 0 ? o.warmup : std::max(1, planned.iters / 10);
  c.window = planned.window;
  c.mode = RunOn::kSluice;
  std::vector<Cmd> bases = baseline_cmds(o, t, c);
  std::vector<Figures> a;
  std::vector<std::vector<Figures>> b(bases.size());
  std::vector<absl::Status> failed(bases.size());
  for (int rep = 0; rep < o.repeats; ++rep) {
    auto f = drive(c);
    a.push_back(f.ok() ? *f : Figures{});
    for (std::size_t i = 0; i < bases.size(); ++i) {
      if (!failed[i].ok()) continue;
      auto g = drive(bases[i]);
      if (g.ok()) b[i].push_back(*g);
      else failed[i] = g.status();
    }
    progress.report(planned, rep, o.repeats);
  }
  std::vector<Row> rows;
  for (std::size_t i = 0; i < std::max<std::size_t>(bases.size(), 1); ++i) {
    Row row = planned;
    row.sluice = median_of(a);
    if (i < bases.size() && failed[i].ok()) row.base = median_of(b[i]);
    if (i < bases.size() && is_mpi(bases[i].mode))
      row.baseline = bases[i].mode == RunOn::kMpiOb1 ? "mpi-ob1" : "mpi-ucx";
    row.ratio = headline_ratio(t, row);
    if (i < bases.size() && !failed[i].ok()) row.note = std::string(failed[i].message());
    else if (t.note != nullptr) row.note = t.note(row, o);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

std::vector<Row> measure(const Options& o, int sides, const Drive& drive) {
  std::vector<Row> rows;
  Progress progress;
  for (const auto& name : o.tests) {
    const Test& t = *find_test(name);  // parse() checked the names
    for (std::size_t size : o.sizes.empty() ? std::vector<std::size_t>(t.sizes.begin(), t.sizes.end()) : o.sizes) {
      Row row = plan(o, t, size);
      std::vector<Row> done = {row};
      if (sides < t.min_sides) {
        done[0].note = "skipped: needs " + std::to_string(t.min_sides) +
                       (o.mode == "cs" ? " ranks (rank mode)" : " ranks or more");
      } else {
        done = run_row(o, t, row, progress, drive);
        progress.clear();
      }
      for (const Row& r : done) {
        rows.push_back(r);
        print_row(r, o);
      }
    }
  }
  return rows;
}

}  // namespace sluice::perf
