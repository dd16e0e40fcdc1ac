#include "options.h"

#include <algorithm>
#include <cstdlib>

#include <sluice/config.h>

namespace sluice::perf {
namespace {

const std::vector<std::string> kAllTests = {"am_lat", "am_bw",   "rpc_lat", "rpc_rate", "read",
                                            "write",  "bulk_bw", "mixed",   "fanin"};

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

}  // namespace

void usage(FILE* out) {
  std::fprintf(out,
               "usage: sluice-perf [-t TEST[,TEST...]|all] [-s SIZES] [-n ITERS] [-w WARMUP] [-W WINDOW]\n"
               "                   [-r REPEATS] [--baseline ucx|bounce|none] [--rpc zero|copy]\n"
               "                   [--offset BYTES] [--format table|csv|json] [--stats]\n"
               "Measures Sluice's latency, message rate and bandwidth between ranks, in the spirit of\n"
               "ucx_perftest; with --baseline, raw UCX (or Sluice's bounce mode) runs the same\n"
               "pattern interleaved with it, and each row prints the ratio. Run it under a\n"
               "launcher: sluice-run -n 2 --bind core sluice-perf ... Exit status 2 on bad\n"
               "arguments, 1 when a run fails.\n"
               "\n"
               "tests (rank 0 against rank 1 unless said; default: am_lat,am_bw,rpc_lat,bulk_bw):\n"
               "  am_lat    one-way latency of a message bounced back by a handler (half the round trip)\n"
               "  am_bw     streaming messages, WINDOW in flight: message rate and bandwidth\n"
               "  rpc_lat   round trip of a call whose reply carries the request's payload back\n"
               "  rpc_rate  calls per second with WINDOW in flight (the server grants SLUICE_RPC_SLOTS)\n"
               "  read      an 8-byte request, SIZE bytes back from the server's block: round trip\n"
               "  write     SIZE bytes into the server's sink, 8 bytes back: round trip\n"
               "  bulk_bw   large messages into the handler's buffer, WINDOW (default 16) in flight\n"
               "  mixed     3+ ranks: small-RPC latency while the others stream 2 MiB messages to the server\n"
               "  fanin     3+ ranks: everyone floods rank 0, which holds what arrives for 200 ms\n"
               "\n"
               "options (defaults in brackets):\n"
               "  -t TESTS        comma-separated, or all\n"
               "  -s SIZES        payload sizes in bytes, units K M G allowed (8,4K,1M) [per test]\n"
               "  -n ITERS        measured iterations per repetition [per test, scaled by size]\n"
               "  -w WARMUP       unmeasured iterations first [ITERS/10, at least 1]\n"
               "  -W WINDOW       operations in flight for am_bw, rpc_rate, bulk_bw [64; bulk_bw 16]\n"
               "  -r REPEATS      repetitions, Sluice and baseline alternating; medians are shown [5]\n"
               "  --baseline B    ucx: raw UCX tag matching doing the same bytes; bounce: Sluice with\n"
               "                  SLUICE_RNDV=n; none [none]\n"
               "  --rpc MODE      zero: replies without copies (into a reply buffer above the eager\n"
               "                  limit); copy: reply_copy [zero]\n"
               "  --offset BYTES  the sending side's buffers start BYTES into their page, 0-4095 [0]\n"
               "  --format F      table, csv or json; table and csv rows appear as they are measured [table]\n"
               "  --stats         print rank 0's Sluice counters at the end\n"
               "\n"
               "ratio:\n"
               "ratio = Sluice / baseline of the headline figure: latency for *_lat, read and write\n"
               "(below 1 is better), rate or bandwidth for the others (above 1 is better); mixed:\n"
               "p99 with streams / p99 without (below 5 is the goal); fanin: receive high-water mark /\n"
               "receive budget (at most 1 is the promise).\n");
}

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
    // A value that must be one of `x`, `y`, `z`.
    auto choice = [&](const char* x, const char* y, const char* z, std::string* out) -> bool {
      auto v = value();
      if (!v) return false;
      if (*v != x && *v != y && *v != z) {
        std::fprintf(stderr, "sluice-perf: %s %s: need %s, %s or %s\n", a.c_str(), v->c_str(), x, y, z);
        return false;
      }
      *out = *v;
      return true;
    };
    if (a == "-t") {
      auto v = value();
      if (!v) return std::nullopt;
      for (const auto& t : split(*v)) {
        if (t == "all") {
          o.tests.insert(o.tests.end(), kAllTests.begin(), kAllTests.end());
        } else if (std::find(kAllTests.begin(), kAllTests.end(), t) != kAllTests.end()) {
          o.tests.push_back(t);
        } else {
          std::fprintf(stderr, "sluice-perf: unknown test '%s'\n", t.c_str());
          return std::nullopt;
        }
      }
    } else if (a == "-s") {
      auto v = value();
      if (!v) return std::nullopt;
      for (const auto& s : split(*v)) {
        auto n = sluice::parse_size(s);
        if (!n.ok() || *n > (std::size_t{256} << 20)) {
          std::fprintf(stderr, "sluice-perf: -s %s: not a size up to 256M\n", s.c_str());
          return std::nullopt;
        }
        o.sizes.push_back(*n);
      }
    } else if (a == "-n") {
      if (!number(1, &o.iters)) return std::nullopt;
    } else if (a == "-w") {
      if (!number(0, &o.warmup)) return std::nullopt;
    } else if (a == "-W") {
      if (!number(1, &o.window)) return std::nullopt;
    } else if (a == "-r") {
      if (!number(1, &o.repeats)) return std::nullopt;
    } else if (a == "--baseline") {
      if (!choice("ucx", "bounce", "none", &o.baseline)) return std::nullopt;
    } else if (a == "--rpc") {
      if (!choice("zero", "copy", "zero", &o.rpc)) return std::nullopt;
    } else if (a == "--format") {
      if (!choice("table", "csv", "json", &o.format)) return std::nullopt;
    } else if (a == "--offset") {
      if (!number(0, &o.offset)) return std::nullopt;
      if (o.offset > 4095) {
        std::fprintf(stderr, "sluice-perf: --offset %d: need 0 to 4095\n", o.offset);
        return std::nullopt;
      }
    } else if (a == "--stats") {
      o.stats = true;
    } else if (a == "-h" || a == "--help") {
      usage(stdout);
      std::exit(0);
    } else {
      std::fprintf(stderr, "sluice-perf: unknown argument '%s'\n", a.c_str());
      return std::nullopt;
    }
  }
  if (o.tests.empty()) o.tests = {"am_lat", "am_bw", "rpc_lat", "bulk_bw"};
  return o;
}

// What one run of one test measured.
}  // namespace sluice::perf
