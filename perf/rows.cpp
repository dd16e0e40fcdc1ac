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
  }
  return o.baseline;
}

// A row's plan: its iterations, window and baseline as the test and the options say.
Row plan(const Options& o, const Test& t, std::size_t size) {
  int iters = o.iters ? o.iters : default_iters(t, size);
  int window = t.takes_window && o.window ? o.window : t.window;
  return Row{t.name, size, iters, window, {}, {}, baseline_name(t, o), NAN, "", o.mode};
}

// What runs the baseline of `t`'s row, with `c` the Sluice run's command; false: nothing.
// mixed's is the same small calls as rpc_lat's, with the streams off.
bool baseline_cmd(const Options& o, const Test& t, Cmd* c) {
  switch (t.baseline) {
    case Baseline::kIdle: std::snprintf(c->test, sizeof(c->test), "rpc_lat"); return true;
    case Baseline::kEngineAlone: c->mode = RunOn::kEngineAlone; return true;
    case Baseline::kBudget: c->mode = RunOn::kRaw; return o.baseline == "ucx" && t.raw != nullptr;
    case Baseline::kChosen: c->mode = o.baseline == "ucx" ? RunOn::kRaw : RunOn::kBounce; return o.baseline != "none";
  }
  return false;
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

// Runs one row -r times, Sluice and its baseline alternating, and fills in its figures.
void run_row(const Options& o, const Test& t, Row& row, Progress& progress,
             const std::function<Figures(const Cmd&)>& drive) {
  Cmd c{};
  std::snprintf(c.test, sizeof(c.test), "%s", t.name);
  c.size = row.size;
  c.iters = row.iters;
  c.warmup = o.warmup >= 0 ? o.warmup : std::max(1, row.iters / 10);
  c.window = row.window;
  c.mode = RunOn::kSluice;
  Cmd base = c;
  bool has_base = baseline_cmd(o, t, &base);
  std::vector<Figures> a, b;
  for (int rep = 0; rep < o.repeats; ++rep) {
    a.push_back(drive(c));
    if (has_base) b.push_back(drive(base));
    progress.report(row, rep, o.repeats);
  }
  row.sluice = median_of(a);
  row.base = median_of(b);
  row.ratio = headline_ratio(t, row);
  if (t.note != nullptr) row.note = t.note(row, o);
}

}  // namespace

std::vector<Row> measure(const Options& o, int sides, const std::function<Figures(const Cmd&)>& drive) {
  std::vector<Row> rows;
  Progress progress;
  for (const auto& name : o.tests) {
    const Test& t = *find_test(name);  // parse() checked the names
    for (std::size_t size : o.sizes.empty() ? std::vector<std::size_t>(t.sizes.begin(), t.sizes.end()) : o.sizes) {
      Row row = plan(o, t, size);
      if (sides < t.min_sides) {
        row.note = "skipped: needs " + std::to_string(t.min_sides) +
                   (o.mode == "cs" ? " ranks (rank mode)" : " ranks or more");
      } else {
        run_row(o, t, row, progress, drive);
        progress.clear();
      }
      rows.push_back(row);
      print_row(row, o);
    }
  }
  return rows;
}

}  // namespace sluice::perf
