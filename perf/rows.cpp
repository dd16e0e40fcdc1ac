#include "rows.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include <sluice/config.h>

namespace sluice::perf {
namespace {

using Clock = std::chrono::steady_clock;

// A row's plan: its iterations, window and baseline as the test and the options say.
Row plan(const Options& o, const std::string& test, std::size_t size) {
  Row row{test, size,  o.iters ? o.iters : default_iters(test, size), o.window ? o.window : 64, {}, {}, o.baseline, NAN,
          "",   o.mode};
  if (test == "am_lat" || test == "rpc_lat" || test == "read" || test == "write") row.window = 1;
  if (test == "bulk_bw" && !o.window) row.window = 16;
  if (test == "mixed" || test == "fanin") row.baseline = test == "mixed" ? "idle" : "budget";
  if (test == "am_submit") {
    row.baseline = "engine";
    row.window = 0;  // no window: the submit queue and the send queue bound what waits
    row.note = std::to_string(o.producers) + (o.producers == 1 ? " producer thread" : " producer threads") +
               " through submit(); baseline: the engine thread sending alone";
  }
  return row;
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
void run_row(const Options& o, Row& row, Progress& progress, const std::function<Figures(const Cmd&)>& drive) {
  const std::string& test = row.test;
  Cmd c{};
  std::snprintf(c.test, sizeof(c.test), "%s", test.c_str());
  c.size = row.size;
  c.iters = row.iters;
  c.warmup = o.warmup >= 0 ? o.warmup : std::max(1, row.iters / 10);
  c.window = row.window;
  std::vector<Figures> a, b;
  for (int rep = 0; rep < o.repeats; ++rep) {
    c.mode = 0;
    a.push_back(drive(c));
    if (test == "mixed") {
      // the same small RPCs with the streams off
      Cmd idle = c;
      std::snprintf(idle.test, sizeof(idle.test), "rpc_lat");
      b.push_back(drive(idle));
    } else if (test == "am_submit") {
      c.mode = kEngineAlone;  // the same messages, sent by the engine thread itself
      b.push_back(drive(c));
    } else if (o.baseline == "ucx" || (o.baseline == "bounce" && test != "fanin")) {
      c.mode = o.baseline == "ucx" ? 1 : 2;
      b.push_back(drive(c));
    }
    progress.report(row, rep, o.repeats);
  }
  row.sluice = median_of(a);
  row.base = median_of(b);
  row.ratio = headline_ratio(row);
  if (test == "fanin") row.note = fanin_note(row);
  if (test == "mixed") row.note = mixed_note(row);
}

}  // namespace

std::vector<Row> measure(const Options& o, int sides, const std::function<Figures(const Cmd&)>& drive) {
  std::vector<Row> rows;
  Progress progress;
  for (const auto& test : o.tests) {
    for (std::size_t size : o.sizes.empty() ? default_sizes(test) : o.sizes) {
      Row row = plan(o, test, size);
      if (test == "mixed" && sides < 3) {
        row.note = o.mode == "cs" ? "skipped: needs 3 ranks (rank mode)" : "skipped: needs 3 ranks or more";
      } else {
        run_row(o, row, progress, drive);
        progress.clear();
      }
      rows.push_back(row);
      print_row(row, o);
    }
  }
  return rows;
}

}  // namespace sluice::perf
