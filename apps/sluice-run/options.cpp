#include "options.h"

#include <cstdlib>
#include <string_view>

namespace sluice::run {

void usage(FILE* out) {
  std::fprintf(out,
               "usage: sluice-run [-n N] [-H HOST[:SLOTS],... | --hostfile FILE] [--launch-agent CMD]\n"
               "                  [--boot-host ADDR] [--bind core|numa|none] [--tag-output]\n"
               "                  [--timeout SECONDS] [--stats] [-x VAR[=VALUE]]... PROGRAM [ARGS...]\n"
               "Starts N ranks of a Sluice job, like mpirun: on this machine, or on the hosts given,\n"
               "filling each host's slots in turn. Each rank gets SLUICE_RANK, SLUICE_SIZE,\n"
               "SLUICE_LOCAL_RANK, SLUICE_LOCAL_SIZE, SLUICE_BOOT=sluice-run and the address and\n"
               "token of the launcher's bootstrap service, through which the ranks exchange their\n"
               "UCX addresses. A rank on another host is started by the launch agent (AGENT HOST\n"
               "COMMAND, as ssh takes them) with the SLUICE_* and UCX_* variables of the launcher's\n"
               "environment and those of -x; its token comes on its standard input, never on a\n"
               "command line. Under a batch system, use mpirun or srun instead (PMIx).\n"
               "\n"
               "options:\n"
               "  -n N            number of ranks [the hosts' slots; required without hosts]\n"
               "  -H LIST         hosts, comma-separated, each HOST or HOST:SLOTS (1 slot by default;\n"
               "                  an IPv6 address in brackets: [fd00::2]:4);\n"
               "                  localhost, this host's name or one of its addresses is this machine\n"
               "  --hostfile FILE\n"
               "                  one host per line: HOST, HOST:SLOTS or HOST slots=SLOTS; # comments\n"
               "  --launch-agent CMD\n"
               "                  what starts a rank on another host, given HOST and a shell command\n"
               "                  line [ssh]\n"
               "  --boot-host ADDR\n"
               "                  the address ranks on other hosts reach the bootstrap service at\n"
               "                  [this machine's address on the route to the first other host]\n"
               "  --bind MODE     core: rank i on core i (round robin); numa: on a NUMA node's cpus;\n"
               "                  none (default): no binding; ranks on this machine only\n"
               "  --tag-output    prefix every output line with [rank]\n"
               "  --timeout S     stop the job and exit 124 when it runs longer than S seconds\n"
               "  --stats         at the end, print every counter's sum, min and max over the ranks\n"
               "                  (each engine's exit line, SLUICE_STATS_TRIGGER=exit; those of ranks\n"
               "                  elsewhere come back through the launch agent); sluice-stats adds\n"
               "                  up the files of jobs mpirun or srun started\n"
               "  -x VAR[=VALUE]  set VAR in every rank (SLUICE_* and UCX_* pass by default)\n"
               "  -h, --help      print this help\n"
               "\n"
               "exit status:\n"
               "  0               every rank exited 0\n"
               "  N               the status of the first rank that failed (128+signal when killed);\n"
               "                  the others are stopped (SIGTERM, then SIGKILL after a grace period)\n"
               "  2               bad arguments\n"
               "  124             --timeout passed\n"
               "\n"
               "signals:\n"
               "  SIGINT, SIGTERM are forwarded to every rank; ranks die with the launcher.\n"
               "\n"
               "examples:\n"
               "  sluice-run -n 2 --bind core sluice-perf -t am_lat --baseline ucx\n"
               "  sluice-run -n 3 --tag-output -x SLUICE_TLS=tcp ./first  # getting-started.md's program\n");
}

namespace {

// Sets the option `flag` takes a value for; false, after saying why, when the value is bad.
bool set_valued(Options& o, std::string_view flag, const char* v) {
  char* end = nullptr;
  if (flag == "-n" || flag == "-np") {
    long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n < 1 || n > 4096) {
      std::fprintf(stderr, "sluice-run: -n %s: need a rank count from 1 to 4096\n", v);
      return false;
    }
    o.n = static_cast<int>(n);
  } else if (flag == "--bind") {
    o.bind = v;
    if (o.bind != "core" && o.bind != "numa" && o.bind != "none") {
      std::fprintf(stderr, "sluice-run: --bind %s: need core, numa or none\n", v);
      return false;
    }
  } else if (flag == "--timeout") {
    o.timeout_s = std::strtod(v, &end);
    if (*end != '\0' || o.timeout_s <= 0) {
      std::fprintf(stderr, "sluice-run: --timeout %s: need a positive number of seconds\n", v);
      return false;
    }
  } else if (flag == "-H" || flag == "--host" || flag == "--hostfile") {
    auto h = flag == "--hostfile" ? read_hostfile(v) : parse_host_list(v);
    if (!h) return false;
    o.hosts = *h;
  } else if (flag == "--launch-agent") {
    o.agent = v;
  } else if (flag == "--boot-host") {
    o.boot_host = v;
  } else {  // -x
    o.exports.emplace_back(v);
  }
  return true;
}

bool takes_value(std::string_view a) {
  for (std::string_view f :
       {"-n", "-np", "--bind", "--timeout", "-H", "--host", "--hostfile", "--launch-agent", "--boot-host", "-x"})
    if (a == f) return true;
  return false;
}

// The rank count and program are there, and the hosts have the slots.
bool complete(Options& o) {
  int slots = 0;
  for (const auto& h : o.hosts) slots += h.slots;
  if (o.n == 0) o.n = slots;
  if (o.n == 0 || o.argv.empty()) {
    std::fprintf(stderr, "sluice-run: need -n N (or hosts) and a program\n");
    return false;
  }
  if (!o.hosts.empty() && o.n > slots) {
    std::fprintf(stderr, "sluice-run: -n %d is more than the hosts' %d slots\n", o.n, slots);
    return false;
  }
  return true;
}

}  // namespace

std::optional<Options> parse_options(int argc, char** argv) {
  Options o;
  int i = 1;
  for (; i < argc; ++i) {
    std::string_view a = argv[i];
    if (takes_value(a)) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "sluice-run: %s needs a value\n", argv[i]);
        return std::nullopt;
      }
      if (!set_valued(o, a, argv[++i])) return std::nullopt;
    } else if (a == "--tag-output") {
      o.tag_output = true;
    } else if (a == "--stats") {
      o.stats = true;
    } else if (a == "-h" || a == "--help") {
      usage(stdout);
      std::exit(0);
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "sluice-run: unknown option %s\n", argv[i]);
      return std::nullopt;
    } else {
      break;
    }
  }
  for (; i < argc; ++i) o.argv.emplace_back(argv[i]);
  if (!complete(o)) return std::nullopt;
  return o;
}

}  // namespace sluice::run
