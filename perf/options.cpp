#include "options.h"

#include <algorithm>
#include <cstdlib>
#include <initializer_list>

#include <sluice/config.h>

#include "tests.h"

namespace sluice::perf {
namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t c = s.find(',', start);
    if (c == std::string::npos) c = s.size();
    if (c > start) out.push_back(s.substr(start, c - start));
    start = c + 1;
  }
  return out;
}

// The tests, from the table: what each measures and which side does what.
void print_tests(FILE* out) {
  std::string defaults;
  for (const Test& t : tests())
    if (t.by_default) defaults += (defaults.empty() ? "" : ",") + std::string(t.name);
  std::fprintf(out, "tests (default: %s; 0 is rank 0 or the client, 1 is rank 1 or the server):\n", defaults.c_str());
  for (const Test& t : tests()) std::fprintf(out, "  %-10s %s.\n             %s.\n", t.name, t.measures, t.sides);
}

// -W's line: the tests it applies to, with their windows without it.
void print_window(FILE* out) {
  std::string windows;
  for (const Test& t : tests())
    if (t.takes_window) windows += (windows.empty() ? "" : ", ") + std::string(t.name) + " " + std::to_string(t.window);
  std::fprintf(out, "  -W WINDOW       operations in flight [%s]\n", windows.c_str());
}

// The MPI baseline's section.
void print_mpi(FILE* out) {
  std::fputs(
      "\n"
      "MPI baseline (--baseline mpi, rank mode):\n"
      "Rank 0 runs sluice-perf-mpi (beside sluice-perf; built where meson finds MPI) as a job of\n"
      "its own, once per repetition and pml, between Sluice's runs (Sluice, ob1, ucx, Sluice, ...):\n"
      "  mpirun -n 2 --bind-to core --mca pml ob1 --mca btl self,vader sluice-perf-mpi ...\n"
      "  mpirun -n 2 --bind-to core --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any ...\n"
      "Both MPI ranks run on rank 0's host, on every CPU it has, while sluice-perf's ranks sleep.\n"
      "Each row of a test with an MPI part (am_lat, am_bw, rpc_lat, rpc_rate, read, write,\n"
      "bulk_bw) comes twice, baseline mpi-ob1 and mpi-ucx, with the same Sluice figures. A pml\n"
      "that cannot run leaves its figures and ratio empty and says why in the table's row and\n"
      "on stderr (pml ucx did not run: ...); it is not tried again in that invocation. The\n"
      "job's environment drops OMPI_* and PMIX_* variables (an enclosing launch's) and, as\n"
      "root, adds OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1.\n",
      out);
}

// The crowd test's flags, in the options section.
void print_crowd_options(FILE* out) {
  std::fputs(
      "  --peers N       crowd: idle clients [100]\n"
      "  --busy K[,K]    crowd: busy clients, a row each, 1-64 [1,8]\n"
      "  --per-process P  crowd: idle client engines per process [40]\n"
      "  --connects seq|all  crowd: the idle clients connect one after another, or all at once\n"
      "                  (every process together, a thread per engine) [seq]\n"
      "  --idle-poll MS  crowd: an idle process's thread progresses its engines every MS ms;\n"
      "                  0: a thread per engine, asleep in Engine::wait() [100]\n"
      "  --seconds S     crowd: each busy run, and the idle CPU measurement [5]\n"
      "  --idle-calls C  crowd: each idle engine makes C calls once connected and C more before\n"
      "                  it quits, and every second one a call per --idle-poll in between (needs\n"
      "                  --idle-poll > 0); the note counts them and those that failed [0]\n"
      "\n",
      out);
}

// The crowd test's section.
void print_crowd(FILE* out) {
  std::fputs(
      "\n"
      "crowd (-t crowd, on its own, without a launcher):\n"
      "sluice-perf forks a server (one engine listening on 127.0.0.1:0, an echo method), a process\n"
      "of busy clients (an engine and a thread each) and ceil(N/P) processes of idle clients (P\n"
      "engines each, progressed every --idle-poll ms). The server and the busy clients are bound\n"
      "to a CPU each when there are two. Each of -r rounds: per K of --busy (and size), K busy\n"
      "engines call with WINDOW in flight [32] for --seconds alone (solo); the N idle clients\n"
      "connect, one after another (--connects all: all at once); the server's CPU is read over --seconds with every client\n"
      "idle; the K busy engines call again among the idle ones; the idle clients exit; the K busy\n"
      "engines call alone again. A row per K: rate_per_s the K busy clients' calls per second among\n"
      "the idle ones, baseline solo (the mean of the two solo runs, which bracket the crowded one),\n"
      "ratio crowded/solo (the median of the rounds'); in columns of their own N, K, Jain's\n"
      "fairness index of the K rates, the server's receive-pool high-water mark / its budget\n"
      "(SLUICE_RECV_POOL_MAX), the N connects' total seconds (all at once: from the start of the\n"
      "connects, the engines created, until the last one is connected) and the idle server's CPU (% of a\n"
      "core). Every process dies with sluice-perf (PR_SET_PDEATHSIG).\n",
      out);
}

}  // namespace

void usage(FILE* out) {
  std::fputs(
      "usage: sluice-perf [-t TEST[,TEST...]|all] [-s SIZES] [-n ITERS] [-w WARMUP] [-W WINDOW]\n"
      "                   [-r REPEATS] [--baseline ucx|bounce|mpi|none] [--rpc zero|copy]\n"
      "                   [--offset BYTES] [--format table|csv|json] [--stats] [--producers P]\n"
      "                   [-m rank|cs] [--server] [--listen HOST:PORT] [--connect HOST:PORT]\n"
      "                   [--mpirun PATH] [--mpi-timeout SECONDS]\n"
      "       sluice-perf -t crowd [--peers N] [--busy K[,K...]] [--per-process P] [--connects seq|all]\n"
      "                   [--idle-poll MS] [--idle-calls C] [--seconds S] [-s SIZES] [-W WINDOW]\n"
      "                   [--format table|csv|json]\n"
      "Measures Sluice's latency, message rate and bandwidth between ranks, in the spirit of\n"
      "ucx_perftest; with --baseline, raw UCX, Open MPI (or Sluice's bounce mode) runs the\n"
      "same pattern interleaved with it, and each row prints the ratio. Run it under a\n"
      "launcher: sluice-run -n 2 --bind core sluice-perf ... Exit status 2 on bad\n"
      "arguments, 1 when a run fails.\n"
      "\n",
      out);
  print_tests(out);
  std::fputs(
      "\n"
      "options (defaults in brackets):\n"
      "  -t TESTS        comma-separated, or all\n"
      "  -s SIZES        payload sizes in bytes, units K M G allowed (8,4K,1M) [per test]\n"
      "  -n ITERS        measured iterations per repetition [per test, scaled by size]\n"
      "  -w WARMUP       unmeasured iterations first [ITERS/10, at least 1]\n",
      out);
  print_window(out);
  std::fputs(
      "  -r REPEATS      repetitions, Sluice and baseline alternating (crowd: rounds); medians\n"
      "                  are shown [5]\n"
      "  --baseline B    ucx: raw UCX tag matching doing the same bytes; bounce: Sluice with\n"
      "                  SLUICE_RNDV=n; mpi: Open MPI, pml ob1 and pml ucx (below); none [none]\n"
      "  --rpc MODE      zero: replies without copies (into a reply buffer above the eager\n"
      "                  limit); copy: reply_copy [zero]\n"
      "  --offset BYTES  the sending side's buffers start BYTES into their page, 0-4095 [0]\n"
      "  --format F      table, csv or json; table and csv rows appear as they are measured [table]\n"
      "  --stats         print the driving side's Sluice counters at the end (rank 0; cs: the client)\n"
      "  --producers P   am_submit: threads submitting sends, 1-64 [4]\n"
      "  -m, --mode M    rank: rank 0 against rank 1 through the launcher's bootstrap; cs:\n"
      "                  client/server through Engine::listen() and connect() (below) [rank]\n"
      "  --server        cs: this process is the server, started without a launcher\n"
      "  --listen H:P    cs: where the server listens; port 0 picks one [127.0.0.1:0]\n"
      "  --connect H:P   cs: this process is the client of the server at H:P, without a launcher\n"
      "  --mpirun PATH   --baseline mpi: the mpirun that starts its jobs [mpirun, on PATH]\n"
      "  --mpi-timeout SECONDS\n"
      "                  --baseline mpi: a job still running after SECONDS is killed [120]\n",
      out);
  print_crowd_options(out);
  std::fputs("ratio (Sluice / baseline of each test's headline figure, by what the test measures):\n", out);
  print_ratios(out, "");
  std::fputs("\nbaselines (the baseline column: --baseline's, or a test's own whatever --baseline says):\n", out);
  print_baselines(out, "");
  std::fputs(
      "\n"
      "cs mode (client/server, -m cs):\n"
      "Every row runs between a listening server engine and a connected client instead of two\n"
      "ranks: the client drives and reports as rank 0 does, the server answers as rank 1 does.\n"
      "Under a launcher (sluice-run -n 2 sluice-perf -m cs ...) rank 0 is the server: it listens\n"
      "on 127.0.0.1, port 0 (or --listen) and publishes the address through the bootstrap, and\n"
      "rank 1 connects to it. Without one, start the server first (it prints where it listens on\n"
      "stderr, and serves one client), then the client:\n"
      "  sluice-perf -m cs --server --listen 127.0.0.1:13337\n"
      "  sluice-perf -m cs --connect 127.0.0.1:13337 -t am_lat,rpc_rate -s 8\n"
      "The client's options choose the run: its hello tells the server --rpc and the largest size.\n"
      "--baseline bounce needs it on both (the server's bounce engine listens on a port of its\n"
      "own, which the hello's answer names); the same options on both sides are always right.\n"
      "SLUICE_AUTH and SLUICE_AUTH_KEY_FILE apply as usual. mixed needs 3 ranks: skipped.\n"
      "--baseline ucx needs the launcher: the raw loop still exchanges worker addresses through\n"
      "its bootstrap and runs over whatever UCX_TLS allows, while Sluice's client/server peers\n"
      "take UCX over shared memory where it reaches them (one host) and Sluice's own TCP\n"
      "transport (the stream, on the door's connection) otherwise. SLUICE_CS_TRANSPORT=stream\n"
      "puts them on the stream on one host too, as SLUICE_TLS=tcp or network namespaces do:\n"
      "in one run, the ratio then compares the two. fanin (the server floods the client) runs\n"
      "without its raw-UCX part.\n",
      out);
  print_mpi(out);
  print_crowd(out);
}

namespace {

// -t's list into o->tests; false after saying what is wrong.
bool parse_tests(const std::string& v, Options* o) {
  for (const auto& t : split(v)) {
    if (t == "all") {
      for (const Test& test : tests())
        if (!test.alone) o->tests.emplace_back(test.name);
    } else if (find_test(t) != nullptr) {
      o->tests.push_back(t);
    } else {
      std::fprintf(stderr, "sluice-perf: -t %s: no such test; the tests are %s, or all\n", t.c_str(),
                   test_names().c_str());
      return false;
    }
  }
  return true;
}

// -s's list into o->sizes.
bool parse_sizes(const std::string& v, Options* o) {
  for (const auto& s : split(v)) {
    auto n = sluice::parse_size(s);
    if (!n.ok() || *n > (std::size_t{256} << 20)) {
      std::fprintf(stderr, "sluice-perf: -s %s: not a size up to 256M\n", s.c_str());
      return false;
    }
    o->sizes.push_back(*n);
  }
  return true;
}

// --busy's list into o->busy: 1 to 64 busy clients per row.
bool parse_busy(const std::string& v, Options* o) {
  o->busy.clear();
  for (const auto& k : split(v)) {
    char* end = nullptr;
    long n = std::strtol(k.c_str(), &end, 10);
    if (*end != '\0' || n < 1 || n > 64) {
      std::fprintf(stderr, "sluice-perf: --busy %s: need numbers from 1 to 64\n", v.c_str());
      return false;
    }
    o->busy.push_back(static_cast<int>(n));
  }
  return !o->busy.empty();
}

// "a, b or c".
std::string one_of(std::initializer_list<const char*> names) {
  std::string out;
  std::size_t i = 0;
  for (const char* n : names) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += n;
    ++i;
  }
  return out;
}

// HOST:PORT with a port from 0 to 65535 (the library checks the host).
bool parse_address(const std::string& flag, const std::string& v, std::string* out) {
  std::size_t colon = v.rfind(':');
  std::string port = colon == std::string::npos ? "" : v.substr(colon + 1);
  bool ok = colon != 0 && !port.empty() && port.size() <= 5 &&
            std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
            std::stoi(port) <= 65535;
  if (!ok) std::fprintf(stderr, "sluice-perf: %s %s: need HOST:PORT\n", flag.c_str(), v.c_str());
  *out = v;
  return ok;
}

// -t crowd runs alone, and its flags need it.
const char* check_crowd(const Options& o) {
  Options defaults;
  bool crowd = std::find(o.tests.begin(), o.tests.end(), "crowd") != o.tests.end();
  if (crowd && o.tests.size() > 1) return "-t crowd runs on its own (it starts its own processes)";
  if (crowd && (o.baseline != "none" || o.server || !o.connect.empty() || !o.listen.empty()))
    return "-t crowd starts its own server and clients, and its baseline is their solo run: no --baseline, "
           "--server, --listen or --connect";
  if (!crowd && (o.peers != defaults.peers || o.busy != defaults.busy || o.per_process != defaults.per_process ||
                 o.connects != defaults.connects || o.idle_poll != defaults.idle_poll ||
                 o.seconds != defaults.seconds || o.idle_calls != defaults.idle_calls))
    return "--peers, --busy, --per-process, --connects, --idle-poll, --idle-calls and --seconds need -t crowd";
  if (o.idle_calls > 0 && o.idle_poll == 0)
    return "--idle-calls needs --idle-poll > 0 (an idle process's thread makes the calls)";
  return nullptr;
}

// The flags that belong together: cs mode's, crowd's, and --offset's range.
bool check(const Options& o) {
  const char* what = nullptr;
  if (o.mode != "cs" && (o.server || !o.listen.empty() || !o.connect.empty()))
    what = "--server, --listen and --connect need -m cs";
  else if (o.baseline != "mpi" && (o.mpirun != "mpirun" || o.mpi_timeout != 120))
    what = "--mpirun and --mpi-timeout need --baseline mpi";
  else if (o.mode == "cs" && o.baseline == "mpi")
    what = "--baseline mpi runs in rank mode: its MPI jobs are two ranks on rank 0's host (sluice-run -n 2)";
  else if (o.server && !o.connect.empty()) what = "--server or --connect, not both";
  else if (!o.listen.empty() && !o.connect.empty()) what = "--listen is the server's, --connect the client's: not both";
  else what = check_crowd(o);
  if (what != nullptr) std::fprintf(stderr, "sluice-perf: %s\n", what);
  if (o.offset > 4095) std::fprintf(stderr, "sluice-perf: --offset %d: need 0 to 4095\n", o.offset);
  if (o.producers > 64) std::fprintf(stderr, "sluice-perf: --producers %d: need 1 to 64\n", o.producers);
  return what == nullptr && o.offset <= 4095 && o.producers <= 64;
}

}  // namespace

std::optional<Options> parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::optional<std::string> {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "sluice-perf: %s needs a value\n", a.c_str());
        return std::nullopt;
      }
      return std::string(argv[++i]);
    };
    auto number = [&](int lo, int* out) -> bool {
      auto v = value();
      if (!v) return false;
      char* end = nullptr;
      long n = std::strtol(v->c_str(), &end, 10);
      if (*end != '\0' || n < lo || n > 100000000) {
        std::fprintf(stderr, "sluice-perf: %s %s: need a number >= %d\n", a.c_str(), v->c_str(), lo);
        return false;
      }
      *out = static_cast<int>(n);
      return true;
    };
    // A value that must be one of `names`.
    auto choice = [&](std::initializer_list<const char*> names, std::string* out) -> bool {
      auto v = value();
      if (!v) return false;
      if (std::find(names.begin(), names.end(), *v) == names.end()) {
        std::fprintf(stderr, "sluice-perf: %s %s: need %s\n", a.c_str(), v->c_str(), one_of(names).c_str());
        return false;
      }
      *out = *v;
      return true;
    };
    std::optional<std::string> v;
    bool ok = true;
    if (a == "-t") ok = (v = value()) && parse_tests(*v, &o);
    else if (a == "-s") ok = (v = value()) && parse_sizes(*v, &o);
    else if (a == "-n") ok = number(1, &o.iters);
    else if (a == "-w") ok = number(0, &o.warmup);
    else if (a == "-W") ok = number(1, &o.window);
    else if (a == "-r") ok = number(1, &o.repeats);
    else if (a == "--baseline") ok = choice({"ucx", "bounce", "mpi", "none"}, &o.baseline);
    else if (a == "--rpc") ok = choice({"zero", "copy"}, &o.rpc);
    else if (a == "--format") ok = choice({"table", "csv", "json"}, &o.format);
    else if (a == "--offset") ok = number(0, &o.offset);
    else if (a == "--stats") o.stats = true;
    else if (a == "--producers") ok = number(1, &o.producers);
    else if (a == "-m" || a == "--mode") ok = choice({"rank", "cs"}, &o.mode);
    else if (a == "--server") o.server = true;
    else if (a == "--listen") ok = (v = value()) && parse_address(a, *v, &o.listen);
    else if (a == "--connect") ok = (v = value()) && parse_address(a, *v, &o.connect);
    else if (a == "--mpirun") ok = (v = value()) && !(o.mpirun = *v).empty();
    else if (a == "--mpi-timeout") ok = number(1, &o.mpi_timeout);
    else if (a == "--peers") ok = number(1, &o.peers);
    else if (a == "--busy") ok = (v = value()) && parse_busy(*v, &o);
    else if (a == "--per-process") ok = number(1, &o.per_process);
    else if (a == "--connects") ok = choice({"seq", "all"}, &o.connects);
    else if (a == "--idle-poll") ok = number(0, &o.idle_poll);
    else if (a == "--idle-calls") ok = number(0, &o.idle_calls);
    else if (a == "--seconds") ok = number(1, &o.seconds);
    else if (a == "-h" || a == "--help") {
      usage(stdout);
      std::exit(0);
    } else {
      std::fprintf(stderr, "sluice-perf: unknown argument '%s'\n", a.c_str());
      return std::nullopt;
    }
    if (!ok) return std::nullopt;
  }
  if (!check(o)) return std::nullopt;
  if (o.tests.empty())
    for (const Test& t : tests())
      if (t.by_default) o.tests.emplace_back(t.name);
  return o;
}
}  // namespace sluice::perf
