// sluice-perf: Sluice's benchmark tool, in the spirit of ucx_perftest.
//
//   sluice-run -n 2 --bind core build/perf/sluice-perf -t am_lat,bulk_bw --baseline ucx
//
// Rank 0 drives and reports; the other ranks answer. With -m cs, a client and a server do
// instead, over Engine::connect()/listen() (connect.h). Every figure is the median of -r
// repetitions; with --baseline, the same pattern runs on raw UCX tag matching (ucx), with
// Sluice's bounce-buffer mode (bounce) or as Open MPI jobs, a row per pml (mpi; mpi_baseline.h),
// interleaved A B A B, and the ratio Sluice/baseline of the test's headline figure is printed
// per row. Exit status 2 on bad arguments.
#include <cstdio>
#include <string>

#include <sluice/sluice.h>

#include "bench.h"
#include "connect.h"
#include "crowd.h"
#include "options.h"
#include "report.h"
#include "rows.h"

namespace {

using namespace sluice::perf;

// A failed setup's exit status: 2 for what the command line got wrong, 1 otherwise.
int failed(const absl::Status& s) {
  std::fprintf(stderr, "sluice-perf: %s\n", s.ToString().c_str());
  return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  auto opts = parse(argc, argv);
  if (!opts) {
    usage(stderr);
    return 2;
  }
  Options& o = *opts;
  // crowd starts its own processes, before this one has any UCX state (crowd.h).
  if (o.tests.size() == 1 && o.tests[0] == "crowd") return run_crowd(o);
  auto ctx = sluice::Context::create();
  if (!ctx.ok()) {
    std::fprintf(stderr, "sluice-perf: %s\n", ctx.status().ToString().c_str());
    return 1;
  }
  if (o.mode == "rank" && (*ctx)->size() < 2) {
    std::fprintf(stderr,
                 "sluice-perf: needs at least 2 ranks (sluice-run -n 2 sluice-perf ...), or -m cs with --server or "
                 "--connect\n");
    return 2;
  }
  auto engines = create_engines(**ctx, o);
  if (!engines.ok()) return failed(engines.status());
  // cs mode: the server takes the client's settings into `o` here.
  auto link = connect_sides(**ctx, *engines, o);
  if (!link.ok()) return failed(link.status());
  Bench bench(**ctx, *engines, *link, o);
  if (auto s = bench.setup(); !s.ok()) return failed(s);
  if (link->role() != 0) {
    bench.serve();
    return 0;
  }
  print_header(o, link->sides());
  auto rows = measure(o, link->size(), [&](const Cmd& c) { return bench.drive(c); });
  bench.quit();
  print_json(rows, o);
  if (o.stats) {
    std::printf("\n# sluice stats, %s, main engine\n%s", link->cs() ? "the client" : "rank 0",
                engines->main->stats().to_text().c_str());
  }
  return 0;
}
