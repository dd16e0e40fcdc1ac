// sluice-run: starts the ranks of a Sluice job on this machine, like mpirun.
//
//   sluice-run -n N [--bind core|numa|none] [--tag-output] [--timeout SECONDS]
//              [-x VAR[=VALUE]]... PROGRAM [ARGS...]
//
// Each rank gets SLUICE_RANK, SLUICE_SIZE, SLUICE_LOCAL_RANK, SLUICE_BOOT=sluice-run and the
// address and token of the launcher's bootstrap service. The launcher forwards SIGINT and
// SIGTERM; when a rank exits non-zero or is killed, it stops the others (SIGTERM, then SIGKILL
// after a grace period) and exits with that rank's status (128+signal for a signal). Ranks
// die with the launcher (PR_SET_PDEATHSIG). Exit status 2: bad arguments; 124: --timeout.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sluice/bootstrap_service.h>
#include <sluice/info.h>

#include "hosts.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int n = 0;
  std::vector<sluice::run::Host> hosts;  // -H or --hostfile; empty: every rank here
  std::string agent = "ssh";             // starts a rank on another host: AGENT HOST COMMAND
  std::string boot_host;                 // the address remote ranks reach the service at
  std::string bind = "none";
  bool tag_output = false;
  double timeout_s = 0;
  std::vector<std::string> exports;
  std::vector<std::string> argv;
};

void usage(FILE* out) {
  std::fprintf(out,
               "usage: sluice-run [-n N] [-H HOST[:SLOTS],... | --hostfile FILE] [--launch-agent CMD]\n"
               "                  [--boot-host ADDR] [--bind core|numa|none] [--tag-output]\n"
               "                  [--timeout SECONDS] [-x VAR[=VALUE]]... PROGRAM [ARGS...]\n"
               "Starts N ranks of a Sluice job, like mpirun: on this machine, or on the hosts given,\n"
               "filling each host's slots in turn. Each rank gets SLUICE_RANK, SLUICE_SIZE,\n"
               "SLUICE_LOCAL_RANK, SLUICE_BOOT=sluice-run and the address and token of the\n"
               "launcher's bootstrap service, through which the ranks exchange their UCX\n"
               "addresses. A rank on another host is started by the launch agent (AGENT HOST\n"
               "COMMAND, as ssh takes them) with the SLUICE_* and UCX_* variables of the launcher's\n"
               "environment and those of -x; its token comes on its standard input, never on a\n"
               "command line. Under a batch system, use mpirun or srun instead (PMIx).\n"
               "\n"
               "options:\n"
               "  -n N            number of ranks [the hosts' slots; required without hosts]\n"
               "  -H LIST         hosts, comma-separated, each HOST or HOST:SLOTS (1 slot by default);\n"
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

std::optional<Options> parse(int argc, char** argv) {
  Options o;
  int i = 1;
  auto need = [&](const char* flag) -> const char* {
    if (i + 1 >= argc) {
      std::fprintf(stderr, "sluice-run: %s needs a value\n", flag);
      return nullptr;
    }
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "-n" || a == "-np") {
      const char* v = need("-n");
      if (!v) return std::nullopt;
      char* end = nullptr;
      long n = std::strtol(v, &end, 10);
      if (*end != '\0' || n < 1 || n > 4096) {
        std::fprintf(stderr, "sluice-run: -n %s: need a rank count from 1 to 4096\n", v);
        return std::nullopt;
      }
      o.n = static_cast<int>(n);
    } else if (a == "--bind") {
      const char* v = need("--bind");
      if (!v) return std::nullopt;
      o.bind = v;
      if (o.bind != "core" && o.bind != "numa" && o.bind != "none") {
        std::fprintf(stderr, "sluice-run: --bind %s: need core, numa or none\n", v);
        return std::nullopt;
      }
    } else if (a == "--tag-output") {
      o.tag_output = true;
    } else if (a == "--timeout") {
      const char* v = need("--timeout");
      if (!v) return std::nullopt;
      char* end = nullptr;
      o.timeout_s = std::strtod(v, &end);
      if (*end != '\0' || o.timeout_s <= 0) {
        std::fprintf(stderr, "sluice-run: --timeout %s: need a positive number of seconds\n", v);
        return std::nullopt;
      }
    } else if (a == "-H" || a == "--host") {
      const char* v = need("-H");
      if (!v) return std::nullopt;
      auto h = sluice::run::parse_host_list(v);
      if (!h) return std::nullopt;
      o.hosts = *h;
    } else if (a == "--hostfile") {
      const char* v = need("--hostfile");
      if (!v) return std::nullopt;
      auto h = sluice::run::read_hostfile(v);
      if (!h) return std::nullopt;
      o.hosts = *h;
    } else if (a == "--launch-agent") {
      const char* v = need("--launch-agent");
      if (!v) return std::nullopt;
      o.agent = v;
    } else if (a == "--boot-host") {
      const char* v = need("--boot-host");
      if (!v) return std::nullopt;
      o.boot_host = v;
    } else if (a == "-x") {
      const char* v = need("-x");
      if (!v) return std::nullopt;
      o.exports.emplace_back(v);
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
  int slots = 0;
  for (const auto& h : o.hosts) slots += h.slots;
  if (o.n == 0) o.n = slots;
  if (o.n == 0 || o.argv.empty()) {
    std::fprintf(stderr, "sluice-run: need -n N (or hosts) and a program\n");
    return std::nullopt;
  }
  if (!o.hosts.empty() && o.n > slots) {
    std::fprintf(stderr, "sluice-run: -n %d is more than the hosts' %d slots\n", o.n, slots);
    return std::nullopt;
  }
  return o;
}

struct Rank {
  pid_t pid = -1;
  bool exited = false;
  int status = 0;
  int out_fd = -1, err_fd = -1;
  std::string out_buf, err_buf;
};

void write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    s.remove_prefix(static_cast<std::size_t>(n));
  }
}

// Prefixes complete lines with [rank]; `flush` writes a trailing partial line too.
void emit_lines(int rank, std::string& buf, int fd, bool flush) {
  std::size_t start = 0;
  while (true) {
    std::size_t nl = buf.find('\n', start);
    if (nl == std::string::npos) break;
    write_all(fd, "[" + std::to_string(rank) + "] " + buf.substr(start, nl - start + 1));
    start = nl + 1;
  }
  buf.erase(0, start);
  if (flush && !buf.empty()) {
    write_all(fd, "[" + std::to_string(rank) + "] " + buf + "\n");
    buf.clear();
  }
}

std::vector<int> cpus_for(const Options& o, int rank, const sluice::CpuLayout& layout) {
  if (o.bind == "core" && !layout.cpus.empty())
    return {layout.cpus[static_cast<std::size_t>(rank) % layout.cpus.size()]};
  if (o.bind == "numa" && !layout.nodes.empty())
    return layout.nodes[static_cast<std::size_t>(rank) % layout.nodes.size()];
  return {};
}

// The shell command line a launch agent runs for rank `r` on another host: the rank's
// variables, the launcher's SLUICE_* and UCX_* and -x ones, the token read from standard
// input, then the program, in the launcher's working directory when the host has it.
std::string remote_command(const Options& o, int r, int local, const std::string& boot_addr) {
  using sluice::run::shell_quote;
  std::vector<std::string> vars = {"SLUICE_RANK=" + std::to_string(r), "SLUICE_SIZE=" + std::to_string(o.n),
                                   "SLUICE_LOCAL_RANK=" + std::to_string(local), "SLUICE_BOOT=sluice-run",
                                   "SLUICE_BOOT_ADDR=" + boot_addr};
  auto ours = [](std::string_view v) {
    return v.rfind("SLUICE_BOOT", 0) == 0 || v.rfind("SLUICE_RANK=", 0) == 0 || v.rfind("SLUICE_SIZE=", 0) == 0 ||
           v.rfind("SLUICE_LOCAL_RANK=", 0) == 0;
  };
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view v = *e;
    if ((v.rfind("SLUICE_", 0) == 0 || v.rfind("UCX_", 0) == 0) && !ours(v)) vars.emplace_back(v);
  }
  for (const auto& x : o.exports) {
    if (x.find('=') != std::string::npos) vars.push_back(x);
    else if (const char* v = std::getenv(x.c_str())) vars.push_back(x + "=" + v);
  }
  char cwd[4096] = {};
  std::string cmd;
  if (::getcwd(cwd, sizeof cwd) != nullptr) cmd = "cd " + shell_quote(cwd) + " 2>/dev/null; ";
  cmd += "read -r SLUICE_BOOT_TOKEN && export SLUICE_BOOT_TOKEN && exec env";
  for (const auto& v : vars) cmd += " " + shell_quote(v);
  for (const auto& a : o.argv) cmd += " " + shell_quote(a);
  return cmd;
}

}  // namespace

int main(int argc, char** argv) {
  auto opts = parse(argc, argv);
  if (!opts) {
    usage(stderr);
    return 2;
  }
  const Options& o = *opts;
  sluice::CpuLayout layout;
  if (o.bind != "none") {
    auto l = sluice::cpu_layout();
    if (!l.ok()) {
      std::fprintf(stderr, "sluice-run: cannot read the topology for --bind: %s\n",
                   std::string(l.status().message()).c_str());
      return 1;
    }
    layout = *l;
  }
  auto service = sluice::BootstrapService::create(o.n);
  if (!service.ok()) {
    std::fprintf(stderr, "sluice-run: cannot start the bootstrap service: %s\n",
                 std::string(service.status().message()).c_str());
    return 1;
  }
  // Where each rank runs (filling each host's slots in turn), and its rank on that host.
  std::vector<const sluice::run::Host*> host_of(static_cast<std::size_t>(o.n), nullptr);
  std::vector<int> local_rank(static_cast<std::size_t>(o.n));
  std::string boot_tcp;  // SLUICE_BOOT_ADDR for ranks elsewhere
  {
    std::size_t h = 0;
    int used = 0;
    for (int r = 0; r < o.n; ++r) {
      if (!o.hosts.empty()) {
        if (used == o.hosts[h].slots) ++h, used = 0;
        host_of[static_cast<std::size_t>(r)] = &o.hosts[h];
      }
      local_rank[static_cast<std::size_t>(r)] = used++;
    }
    const sluice::run::Host* remote = nullptr;
    for (const auto* hp : host_of)
      if (hp != nullptr && !hp->local && remote == nullptr) remote = hp;
    if (remote != nullptr) {
      std::string ip = o.boot_host.empty() ? sluice::run::address_towards(remote->name) : o.boot_host;
      if (ip.empty()) {
        std::fprintf(stderr, "sluice-run: no route to %s to offer its ranks the bootstrap service; give --boot-host\n",
                     remote->name.c_str());
        return 1;
      }
      auto port = (*service)->listen_tcp("0.0.0.0", 0);
      if (!port.ok()) {
        std::fprintf(stderr, "sluice-run: %s\n", std::string(port.status().message()).c_str());
        return 1;
      }
      boot_tcp = "tcp:" + ip + ":" + std::to_string(*port);
    }
  }
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGINT, SIGTERM, SIGCHLD, SIGHUP, SIGQUIT}) sigaddset(&mask, s);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  ::signal(SIGPIPE, SIG_IGN);

  pid_t launcher = getpid();
  std::vector<Rank> ranks(static_cast<std::size_t>(o.n));
  for (int r = 0; r < o.n; ++r) {
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    if (o.tag_output && (pipe2(out, O_CLOEXEC | O_NONBLOCK) != 0 || pipe2(err, O_CLOEXEC | O_NONBLOCK) != 0)) {
      std::perror("sluice-run: pipe");
      return 1;
    }
    const sluice::run::Host* host = host_of[static_cast<std::size_t>(r)];
    bool remote = host != nullptr && !host->local;
    std::vector<int> cpus = remote ? std::vector<int>{} : cpus_for(o, r, layout);
    int token_pipe[2] = {-1, -1};  // a remote rank reads its token from its standard input
    if (remote && pipe2(token_pipe, O_CLOEXEC) != 0) {
      std::perror("sluice-run: pipe");
      return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("sluice-run: fork");
      for (auto& rk : ranks)
        if (rk.pid > 0) kill(rk.pid, SIGKILL);
      return 1;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher) _exit(127);  // the launcher died before we got here
      sigprocmask(SIG_UNBLOCK, &mask, nullptr);
      ::signal(SIGPIPE, SIG_DFL);
      if (o.tag_output) {
        dup2(out[1], 1);
        dup2(err[1], 2);
        // The launcher reads without blocking; the rank writes as usual.
        fcntl(1, F_SETFL, fcntl(1, F_GETFL) & ~O_NONBLOCK);
        fcntl(2, F_SETFL, fcntl(2, F_GETFL) & ~O_NONBLOCK);
      }
      if (!cpus.empty()) {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int c : cpus) CPU_SET(c, &set);
        sched_setaffinity(0, sizeof(set), &set);
      }
      if (remote) {
        dup2(token_pipe[0], 0);
        std::vector<std::string> argv = sluice::run::agent_argv(
            o.agent, host->name, remote_command(o, r, local_rank[static_cast<std::size_t>(r)], boot_tcp));
        std::vector<char*> args;
        for (auto& a : argv) args.push_back(a.data());
        args.push_back(nullptr);
        execvp(args[0], args.data());
        std::fprintf(stderr, "sluice-run: cannot run the launch agent %s: %s\n", args[0], std::strerror(errno));
        _exit(127);
      }
      setenv("SLUICE_RANK", std::to_string(r).c_str(), 1);
      setenv("SLUICE_SIZE", std::to_string(o.n).c_str(), 1);
      setenv("SLUICE_LOCAL_RANK", std::to_string(local_rank[static_cast<std::size_t>(r)]).c_str(), 1);
      setenv("SLUICE_BOOT", "sluice-run", 1);
      setenv("SLUICE_BOOT_ADDR", (*service)->address().c_str(), 1);
      setenv("SLUICE_BOOT_TOKEN", (*service)->token().c_str(), 1);
      for (const auto& x : o.exports) {
        auto eq = x.find('=');
        if (eq != std::string::npos) setenv(x.substr(0, eq).c_str(), x.substr(eq + 1).c_str(), 1);
      }
      std::vector<char*> args;
      for (const auto& a : o.argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execvp(args[0], args.data());
      std::fprintf(stderr, "sluice-run: cannot run %s: %s\n", args[0], std::strerror(errno));
      _exit(127);
    }
    ranks[static_cast<std::size_t>(r)].pid = pid;
    if (remote) {
      ::close(token_pipe[0]);
      write_all(token_pipe[1], (*service)->token() + "\n");
      ::close(token_pipe[1]);
    }
    if (o.tag_output) {
      ::close(out[1]);
      ::close(err[1]);
      ranks[static_cast<std::size_t>(r)].out_fd = out[0];
      ranks[static_cast<std::size_t>(r)].err_fd = err[0];
    }
  }

  auto start = Clock::now();
  std::optional<int> exit_code;                          // the job's status once decided
  Clock::time_point kill_at = Clock::time_point::max();  // SIGKILL the rest then
  constexpr auto kGrace = std::chrono::seconds(3);
  auto stop_all = [&](int sig) {
    for (auto& rk : ranks)
      if (!rk.exited) kill(rk.pid, sig);
  };
  int alive = o.n;
  while (true) {
    bool pipes_open = false;
    for (auto& rk : ranks) pipes_open = pipes_open || rk.out_fd >= 0 || rk.err_fd >= 0;
    if (alive == 0 && !pipes_open) break;
    std::vector<pollfd> pfds;
    pfds.push_back({sfd, POLLIN, 0});
    for (int fd : (*service)->fds()) pfds.push_back({fd, POLLIN, 0});
    for (auto& rk : ranks) {
      if (rk.out_fd >= 0) pfds.push_back({rk.out_fd, POLLIN, 0});
      if (rk.err_fd >= 0) pfds.push_back({rk.err_fd, POLLIN, 0});
    }
    ::poll(pfds.data(), pfds.size(), 100);
    (*service)->handle();
    for (auto& rk : ranks) {
      for (auto [fdp, buf, dest] : {std::tuple{&rk.out_fd, &rk.out_buf, 1}, std::tuple{&rk.err_fd, &rk.err_buf, 2}}) {
        if (*fdp < 0) continue;
        char tmp[65536];
        ssize_t n = ::read(*fdp, tmp, sizeof(tmp));
        int rank = static_cast<int>(&rk - ranks.data());
        if (n > 0) {
          buf->append(tmp, static_cast<std::size_t>(n));
          emit_lines(rank, *buf, dest, false);
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR && errno != EWOULDBLOCK)) {
          emit_lines(rank, *buf, dest, true);
          ::close(*fdp);
          *fdp = -1;
        }
      }
    }
    signalfd_siginfo si;
    while (::read(sfd, &si, sizeof(si)) == sizeof(si)) {
      int sig = static_cast<int>(si.ssi_signo);
      if (sig == SIGCHLD) continue;
      std::fprintf(stderr, "sluice-run: got signal %d (%s), forwarding to the ranks\n", sig, strsignal(sig));
      stop_all(sig);
      if (!exit_code) exit_code = 128 + sig;
      if (kill_at == Clock::time_point::max()) kill_at = Clock::now() + kGrace;
    }
    int wstatus;
    pid_t pid;
    while ((pid = waitpid(-1, &wstatus, WNOHANG)) > 0) {
      for (auto& rk : ranks) {
        if (rk.pid != pid) continue;
        rk.exited = true;
        rk.status = wstatus;
        --alive;
        int rank = static_cast<int>(&rk - ranks.data());
        bool bad = !(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
        if (bad && !exit_code) {
          if (WIFSIGNALED(wstatus)) {
            std::fprintf(stderr, "sluice-run: rank %d (pid %d) was killed by signal %d (%s); stopping the job\n", rank,
                         pid, WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus)));
            exit_code = 128 + WTERMSIG(wstatus);
          } else {
            std::fprintf(stderr, "sluice-run: rank %d (pid %d) exited with status %d; stopping the job\n", rank, pid,
                         WEXITSTATUS(wstatus));
            exit_code = WEXITSTATUS(wstatus);
          }
          stop_all(SIGTERM);
          kill_at = Clock::now() + kGrace;
        }
      }
    }
    auto now = Clock::now();
    if (o.timeout_s > 0 && !exit_code && now - start > std::chrono::duration<double>(o.timeout_s)) {
      std::fprintf(stderr, "sluice-run: the job ran longer than --timeout %g s; stopping it\n", o.timeout_s);
      exit_code = 124;
      stop_all(SIGTERM);
      kill_at = now + kGrace;
    }
    if (now >= kill_at && alive > 0) {
      std::fprintf(stderr, "sluice-run: %d rank(s) still running after SIGTERM; sending SIGKILL\n", alive);
      stop_all(SIGKILL);
      kill_at = Clock::time_point::max();
    }
  }
  return exit_code.value_or(0);
}
