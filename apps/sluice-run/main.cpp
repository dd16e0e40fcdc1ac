// sluice-run: starts the ranks of a Sluice job on this machine, like mpirun.
//
//   sluice-run -n N [--bind core|numa|none] [--tag-output] [--timeout SECONDS] [--stats]
//              [-x VAR[=VALUE]]... PROGRAM [ARGS...]   (options.h has them all)
//
// Each rank gets SLUICE_RANK, SLUICE_SIZE, SLUICE_LOCAL_RANK, SLUICE_LOCAL_SIZE (the job's
// ranks on its host), SLUICE_BOOT=sluice-run and the address and token of the launcher's
// bootstrap service. The launcher forwards SIGINT and SIGTERM; when a rank exits non-zero or
// is killed, it stops the others (SIGTERM, then SIGKILL after a grace period) and exits with
// that rank's status (128+signal for a signal). Ranks die with the launcher
// (PR_SET_PDEATHSIG). Exit status 2: bad arguments; 124: --timeout.
//
// main's steps, each a function below: parse_options (options.h), the bootstrap service,
// prepare (--bind's layout, --stats' directory, place_ranks), take_signals, start_ranks
// (exec_rank in each child), supervise (pump_output, forward_signals, reap, check_deadlines)
// until every rank has exited, then print_stats (which brings back --stats' counters of ranks
// elsewhere through the launch agent).
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
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <sluice/bootstrap_service.h>
#include <sluice/info.h>

#include "gather.h"
#include "hosts.h"
#include "job_stats.h"
#include "options.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using sluice::run::Options;

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
// With --stats, the rank's counters go to a directory of its own there, made first.
std::string remote_command(const Options& o, int r, std::pair<int, int> local, const std::string& boot_addr,
                           const sluice::run::JobStats* stats) {
  using sluice::run::shell_quote;
  std::vector<std::string> vars = {"SLUICE_RANK=" + std::to_string(r),
                                   "SLUICE_SIZE=" + std::to_string(o.n),
                                   "SLUICE_LOCAL_RANK=" + std::to_string(local.first),
                                   "SLUICE_LOCAL_SIZE=" + std::to_string(local.second),
                                   "SLUICE_BOOT=sluice-run",
                                   "SLUICE_BOOT_ADDR=" + boot_addr};
  auto ours = [](std::string_view v) {
    return v.rfind("SLUICE_BOOT", 0) == 0 || v.rfind("SLUICE_RANK=", 0) == 0 || v.rfind("SLUICE_SIZE=", 0) == 0 ||
           v.rfind("SLUICE_LOCAL_RANK=", 0) == 0 || v.rfind("SLUICE_LOCAL_SIZE=", 0) == 0;
  };
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view v = *e;
    if ((v.rfind("SLUICE_", 0) == 0 || v.rfind("UCX_", 0) == 0) && !ours(v)) vars.emplace_back(v);
  }
  for (const auto& x : o.exports) {
    if (x.find('=') != std::string::npos) vars.push_back(x);
    else if (const char* v = std::getenv(x.c_str())) vars.push_back(x + "=" + v);
  }
  if (stats != nullptr)  // last: they replace the ranks' own, -x's included
    for (const auto& [k, v] : stats->rank_env(r, false)) vars.emplace_back(k).append("=").append(v);
  char cwd[4096] = {};
  std::string cmd = stats != nullptr ? stats->remote_prepare(r) : "";
  if (::getcwd(cwd, sizeof cwd) != nullptr) cmd += "cd " + shell_quote(cwd) + " 2>/dev/null; ";
  cmd += "read -r SLUICE_BOOT_TOKEN && export SLUICE_BOOT_TOKEN && exec env";
  for (const auto& v : vars) cmd += " " + shell_quote(v);
  for (const auto& a : o.argv) cmd += " " + shell_quote(a);
  return cmd;
}

// The job: its ranks, where they run and what the launcher decided about them so far.
struct Job {
  Job(const Options& opts, sluice::BootstrapService& s) : o(opts), service(s) {}
  const Options& o;
  sluice::BootstrapService& service;
  sluice::CpuLayout layout;
  std::optional<sluice::run::JobStats> stats;
  std::vector<const sluice::run::Host*> host_of;  // nullptr: here
  std::vector<int> local_rank;
  std::vector<int> local_size;  // ranks on the same machine: here, or the same host elsewhere
  std::string boot_tcp;         // SLUICE_BOOT_ADDR for ranks elsewhere
  std::vector<Rank> ranks;
  sigset_t mask{};
  int sfd = -1;
  pid_t launcher = getpid();
  std::optional<int> exit_code;                          // the job's status once decided
  Clock::time_point kill_at = Clock::time_point::max();  // SIGKILL the rest then
  Clock::time_point start = Clock::now();
  int alive = 0;

  bool remote(int r) const {
    const auto* h = host_of[static_cast<std::size_t>(r)];
    return h != nullptr && !h->local;
  }
  void stop_all(int sig) {
    for (auto& rk : ranks)
      if (!rk.exited) kill(rk.pid, sig);
  }
};

constexpr auto kGrace = std::chrono::seconds(3);
constexpr auto kGatherTimeout = std::chrono::seconds(30);  // --stats: for ranks elsewhere

// Where each rank runs (filling each host's slots in turn), its rank on that host, how many
// ranks share its machine, and, when one runs elsewhere, the service on TCP. False after a
// message.
bool place_ranks(Job& job) {
  const Options& o = job.o;
  job.host_of.assign(static_cast<std::size_t>(o.n), nullptr);
  job.local_rank.assign(static_cast<std::size_t>(o.n), 0);
  std::size_t h = 0;
  int used = 0;
  for (int r = 0; r < o.n; ++r) {
    if (!o.hosts.empty()) {
      if (used == o.hosts[h].slots) ++h, used = 0;
      job.host_of[static_cast<std::size_t>(r)] = &o.hosts[h];
    }
    job.local_rank[static_cast<std::size_t>(r)] = used++;
  }
  // The ranks of each machine: here (""), or a host elsewhere by name.
  auto machine = [&job](int r) { return job.remote(r) ? job.host_of[static_cast<std::size_t>(r)]->name : ""; };
  std::map<std::string, int> on;
  for (int r = 0; r < o.n; ++r) ++on[machine(r)];
  job.local_size.resize(static_cast<std::size_t>(o.n));
  for (int r = 0; r < o.n; ++r) job.local_size[static_cast<std::size_t>(r)] = on[machine(r)];
  const sluice::run::Host* remote = nullptr;
  for (const auto* hp : job.host_of)
    if (hp != nullptr && !hp->local && remote == nullptr) remote = hp;
  if (remote == nullptr) return true;
  std::string ip = o.boot_host.empty() ? sluice::run::address_towards(remote->name) : o.boot_host;
  if (ip.empty()) {
    std::fprintf(stderr, "sluice-run: no route to %s to offer its ranks the bootstrap service; give --boot-host\n",
                 remote->name.c_str());
    return false;
  }
  bool v6 = ip.find(':') != std::string::npos;
  auto port = job.service.listen_tcp(v6 ? "::" : "0.0.0.0", 0);
  if (!port.ok()) {
    std::fprintf(stderr, "sluice-run: %s\n", std::string(port.status().message()).c_str());
    return false;
  }
  job.boot_tcp = "tcp:" + (v6 ? "[" + ip + "]" : ip) + ":" + std::to_string(*port);
  return true;
}

// In the child of a rank here: its CPUs, as --bind says.
void bind_rank(const Job& job, int r) {
  if (std::vector<int> cpus = cpus_for(job.o, r, job.layout); !cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : cpus) CPU_SET(c, &set);
    sched_setaffinity(0, sizeof(set), &set);
  }
}

// In the child of a rank here: its variables, -x's, and --stats'.
void set_rank_env(const Job& job, int r) {
  const Options& o = job.o;
  setenv("SLUICE_RANK", std::to_string(r).c_str(), 1);
  setenv("SLUICE_SIZE", std::to_string(o.n).c_str(), 1);
  setenv("SLUICE_LOCAL_RANK", std::to_string(job.local_rank[static_cast<std::size_t>(r)]).c_str(), 1);
  setenv("SLUICE_LOCAL_SIZE", std::to_string(job.local_size[static_cast<std::size_t>(r)]).c_str(), 1);
  setenv("SLUICE_BOOT", "sluice-run", 1);
  setenv("SLUICE_BOOT_ADDR", job.service.address().c_str(), 1);
  setenv("SLUICE_BOOT_TOKEN", job.service.token().c_str(), 1);
  for (const auto& x : o.exports) {
    auto eq = x.find('=');
    if (eq != std::string::npos) setenv(x.substr(0, eq).c_str(), x.substr(eq + 1).c_str(), 1);
  }
  if (job.stats)
    for (const auto& [k, v] : job.stats->rank_env(r, true)) setenv(k.c_str(), v.c_str(), 1);
}

// In the child: the rank's environment, binding and output, then its program (or, for a rank
// elsewhere, the launch agent). Never returns.
[[noreturn]] void exec_rank(const Job& job, int r, int out_w, int err_w, int token_r) {
  const Options& o = job.o;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != job.launcher) _exit(127);  // the launcher died before we got here
  sigprocmask(SIG_UNBLOCK, &job.mask, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  if (o.tag_output) {
    dup2(out_w, 1);
    dup2(err_w, 2);
    // The launcher reads without blocking; the rank writes as usual.
    fcntl(1, F_SETFL, fcntl(1, F_GETFL) & ~O_NONBLOCK);
    fcntl(2, F_SETFL, fcntl(2, F_GETFL) & ~O_NONBLOCK);
  }
  std::vector<std::string> argv = o.argv;
  if (job.remote(r)) {
    dup2(token_r, 0);
    argv = sluice::run::agent_argv(
        o.agent, job.host_of[static_cast<std::size_t>(r)]->name,
        remote_command(o, r, {job.local_rank[static_cast<std::size_t>(r)], job.local_size[static_cast<std::size_t>(r)]},
                       job.boot_tcp, job.stats ? &*job.stats : nullptr));
  } else {
    bind_rank(job, r);
    set_rank_env(job, r);
  }
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::fprintf(stderr, "sluice-run: cannot run %s%s: %s\n", job.remote(r) ? "the launch agent " : "", args[0],
               std::strerror(errno));
  _exit(127);
}

// Forks every rank; false (the ones started are killed) after a message.
bool start_ranks(Job& job) {
  const Options& o = job.o;
  job.ranks.assign(static_cast<std::size_t>(o.n), Rank{});
  for (int r = 0; r < o.n; ++r) {
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    if (o.tag_output && (pipe2(out, O_CLOEXEC | O_NONBLOCK) != 0 || pipe2(err, O_CLOEXEC | O_NONBLOCK) != 0)) {
      std::perror("sluice-run: pipe");
      return false;
    }
    int token_pipe[2] = {-1, -1};  // a remote rank reads its token from its standard input
    if (job.remote(r) && pipe2(token_pipe, O_CLOEXEC) != 0) {
      std::perror("sluice-run: pipe");
      return false;
    }
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("sluice-run: fork");
      job.stop_all(SIGKILL);
      return false;
    }
    if (pid == 0) exec_rank(job, r, out[1], err[1], token_pipe[0]);
    Rank& rk = job.ranks[static_cast<std::size_t>(r)];
    rk.pid = pid;
    if (job.remote(r)) {
      ::close(token_pipe[0]);
      write_all(token_pipe[1], job.service.token() + "\n");
      ::close(token_pipe[1]);
    }
    if (o.tag_output) {
      ::close(out[1]);
      ::close(err[1]);
      rk.out_fd = out[0];
      rk.err_fd = err[0];
    }
  }
  job.alive = o.n;
  return true;
}

// Copies what the ranks wrote (--tag-output), line by line with their rank.
void pump_output(Job& job) {
  for (auto& rk : job.ranks) {
    for (auto [fdp, buf, dest] : {std::tuple{&rk.out_fd, &rk.out_buf, 1}, std::tuple{&rk.err_fd, &rk.err_buf, 2}}) {
      if (*fdp < 0) continue;
      char tmp[65536];
      ssize_t n = ::read(*fdp, tmp, sizeof(tmp));
      int rank = static_cast<int>(&rk - job.ranks.data());
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
}

void forward_signals(Job& job) {
  signalfd_siginfo si;
  while (::read(job.sfd, &si, sizeof(si)) == sizeof(si)) {
    int sig = static_cast<int>(si.ssi_signo);
    if (sig == SIGCHLD) continue;
    std::fprintf(stderr, "sluice-run: got signal %d (%s), forwarding to the ranks\n", sig, strsignal(sig));
    job.stop_all(sig);
    if (!job.exit_code) job.exit_code = 128 + sig;
    if (job.kill_at == Clock::time_point::max()) job.kill_at = Clock::now() + kGrace;
  }
}

// Collects ranks that exited; the first that failed decides the job's status and stops the rest.
void reap(Job& job) {
  int wstatus;
  pid_t pid;
  while ((pid = waitpid(-1, &wstatus, WNOHANG)) > 0) {
    for (auto& rk : job.ranks) {
      if (rk.pid != pid) continue;
      rk.exited = true;
      rk.status = wstatus;
      --job.alive;
      int rank = static_cast<int>(&rk - job.ranks.data());
      bool bad = !(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
      if (!bad || job.exit_code) continue;
      if (WIFSIGNALED(wstatus)) {
        std::fprintf(stderr, "sluice-run: rank %d (pid %d) was killed by signal %d (%s); stopping the job\n", rank, pid,
                     WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus)));
        job.exit_code = 128 + WTERMSIG(wstatus);
      } else {
        std::fprintf(stderr, "sluice-run: rank %d (pid %d) exited with status %d; stopping the job\n", rank, pid,
                     WEXITSTATUS(wstatus));
        job.exit_code = WEXITSTATUS(wstatus);
      }
      job.stop_all(SIGTERM);
      job.kill_at = Clock::now() + kGrace;
    }
  }
}

// --timeout, and SIGKILL for ranks that outlived their SIGTERM by the grace period.
void check_deadlines(Job& job) {
  auto now = Clock::now();
  if (job.o.timeout_s > 0 && !job.exit_code && now - job.start > std::chrono::duration<double>(job.o.timeout_s)) {
    std::fprintf(stderr, "sluice-run: the job ran longer than --timeout %g s; stopping it\n", job.o.timeout_s);
    job.exit_code = 124;
    job.stop_all(SIGTERM);
    job.kill_at = now + kGrace;
  }
  if (now >= job.kill_at && job.alive > 0) {
    std::fprintf(stderr, "sluice-run: %d rank(s) still running after SIGTERM; sending SIGKILL\n", job.alive);
    job.stop_all(SIGKILL);
    job.kill_at = Clock::time_point::max();
  }
}

// Serves the bootstrap service and the ranks' output until every rank has exited.
void supervise(Job& job) {
  while (true) {
    bool pipes_open = false;
    for (auto& rk : job.ranks) pipes_open = pipes_open || rk.out_fd >= 0 || rk.err_fd >= 0;
    if (job.alive == 0 && !pipes_open) break;
    std::vector<pollfd> pfds;
    pfds.push_back({job.sfd, POLLIN, 0});
    for (int fd : job.service.fds()) pfds.push_back({fd, POLLIN, 0});
    for (auto& rk : job.ranks) {
      if (rk.out_fd >= 0) pfds.push_back({rk.out_fd, POLLIN, 0});
      if (rk.err_fd >= 0) pfds.push_back({rk.err_fd, POLLIN, 0});
    }
    ::poll(pfds.data(), pfds.size(), 100);
    job.service.handle();
    pump_output(job);
    forward_signals(job);
    reap(job);
    check_deadlines(job);
  }
}

// --stats: what ranks elsewhere left on their hosts comes back through the launch agent (a
// signal for the launcher stops that), then the table.
void print_stats(Job& job) {
  std::vector<int> elsewhere;
  std::vector<std::vector<std::string>> collect;
  for (int r = 0; r < job.o.n; ++r) {
    if (!job.remote(r)) continue;
    elsewhere.push_back(r);
    collect.push_back(sluice::run::agent_argv(job.o.agent, job.host_of[static_cast<std::size_t>(r)]->name,
                                              job.stats->remote_collect(r)));
  }
  auto signalled = [&job] {
    signalfd_siginfo si;
    bool any = false;
    while (::read(job.sfd, &si, sizeof(si)) == sizeof(si)) any = any || si.ssi_signo != SIGCHLD;
    return any;
  };
  auto got = sluice::run::gather_output(collect, sluice::run::kMaxRankStats, kGatherTimeout, job.sfd, signalled);
  std::vector<std::optional<sluice::run::Gathered>> remote(static_cast<std::size_t>(job.o.n));
  for (std::size_t i = 0; i < elsewhere.size(); ++i) remote[static_cast<std::size_t>(elsewhere[i])] = std::move(got[i]);
  job.stats->print(stderr, remote);
}

// What the job needs before its ranks start: the CPU layout for --bind, the directory for
// --stats, where each rank runs. False after a message.
bool prepare(Job& job) {
  if (job.o.bind != "none") {
    auto l = sluice::cpu_layout();
    if (!l.ok()) {
      std::fprintf(stderr, "sluice-run: cannot read the topology for --bind: %s\n",
                   std::string(l.status().message()).c_str());
      return false;
    }
    job.layout = *l;
  }
  if (job.o.stats) {
    auto stats = sluice::run::JobStats::create();
    if (!stats) return false;
    job.stats.emplace(std::move(*stats));
  }
  return place_ranks(job);
}

// The signals the launcher forwards (and SIGCHLD) arrive through job.sfd from now on; a rank
// that closes its output pipe does not kill the launcher.
void take_signals(Job& job) {
  sigemptyset(&job.mask);
  for (int s : {SIGINT, SIGTERM, SIGCHLD, SIGHUP, SIGQUIT}) sigaddset(&job.mask, s);
  sigprocmask(SIG_BLOCK, &job.mask, nullptr);
  job.sfd = signalfd(-1, &job.mask, SFD_CLOEXEC | SFD_NONBLOCK);
  ::signal(SIGPIPE, SIG_IGN);
}

}  // namespace

int main(int argc, char** argv) {
  auto opts = sluice::run::parse_options(argc, argv);
  if (!opts) {
    sluice::run::usage(stderr);
    return 2;
  }
  auto service = sluice::BootstrapService::create(opts->n);
  if (!service.ok()) {
    std::fprintf(stderr, "sluice-run: cannot start the bootstrap service: %s\n",
                 std::string(service.status().message()).c_str());
    return 1;
  }
  Job job(*opts, **service);
  if (!prepare(job)) return 1;
  take_signals(job);
  if (!start_ranks(job)) return 1;
  supervise(job);
  if (job.stats) print_stats(job);
  return job.exit_code.value_or(0);
}
