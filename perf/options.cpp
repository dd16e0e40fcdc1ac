#include "options.h"

#include <algorithm>
#include <cstdlib>

#include <sluice/config.h>

namespace sluice::perf {
namespace {

const std::vector<std::string> kAllTests = {"am_lat", "am_bw", "rpc_lat", "rpc_rate", "read", "write", "bulk_bw", "mixed", "fanin"};

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
               "tests: am_lat am_bw rpc_lat rpc_rate read write bulk_bw mixed fanin\n"
               "run under a launcher: sluice-run -n 2 --bind core sluice-perf ...\n");
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
