#include "mpi_baseline.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "rows.h"
#include "tests.h"

extern char** environ;  // NOLINT(readability-redundant-declaration): unistd.h declares it only with _GNU_SOURCE

namespace sluice::perf {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kProgram[] = "sluice-perf-mpi";

// `name` as execvp would find it: a path as it is, else the first executable on PATH; "" for none.
std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  for (std::size_t start = 0; start <= dirs.size();) {
    std::size_t colon = std::min(dirs.find(':', start), dirs.size());
    std::string candidate = (colon > start ? dirs.substr(start, colon - start) : ".") + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = colon + 1;
  }
  return "";
}

// The job's environment: this one without what an enclosing MPI or PMIx launch set (mpirun
// would take itself for one of its ranks), and with Open MPI's consent to run as root.
std::vector<std::string> job_env() {
  std::vector<std::string> env;
  bool allow = false;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string v = *e;
    if (v.rfind("OMPI_ALLOW_RUN_AS_ROOT", 0) == 0) allow = true;
    else if (v.rfind("OMPI_", 0) == 0 || v.rfind("PMIX_", 0) == 0) continue;
    env.push_back(v);
  }
  if (::geteuid() == 0 && !allow) {
    env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT=1");
    env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
  }
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& v) {
  std::vector<char*> p;
  p.reserve(v.size() + 1);
  for (auto& s : v) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

// The child's side of run_child: only system calls between fork() and exec (this process has
// threads). Never returns.
[[noreturn]] void exec_child(int out, char* const* argv, char* const* envp) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // sluice-perf gone: the job goes too
  int null = ::open("/dev/null", O_RDONLY);
  ::dup2(null, 0);
  ::dup2(out, 1);
  ::dup2(out, 2);
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int i = 0; i < CPU_SETSIZE; ++i) CPU_SET(i, &all);
  ::sched_setaffinity(0, sizeof(all), &all);
  ::execve(argv[0], argv, envp);
  static constexpr char kFailed[] = "exec failed\n";
  (void)!::write(2, kFailed, sizeof(kFailed) - 1);
  ::_exit(127);
}

// The first line of `output` that says something (Open MPI frames its messages in dashes).
std::string first_line(const std::string& output) {
  std::size_t start = 0;
  while (start < output.size()) {
    std::size_t end = std::min(output.find('\n', start), output.size());
    std::string line = output.substr(start, end - start);
    start = end + 1;
    if (line.find_first_not_of("- \t\r") != std::string::npos) return line;
  }
  return "";
}

// How a job ended, for the message of one that gave no figures.
std::string ending(const ChildOutput& r) {
  if (WIFEXITED(r.status)) return "exit status " + std::to_string(WEXITSTATUS(r.status));
  if (WIFSIGNALED(r.status)) return std::string("killed by ") + strsignal(WTERMSIG(r.status));
  return "ended";
}

// The figures of `t`'s row from the job's line, as the raw loop's are made (from_rtts()).
std::optional<Figures> figures_of(const Test& t, const Cmd& c, const std::string& output) {
  std::size_t at = output.find("sluice-perf-mpi rtt_p50_us ");
  double p50 = NAN, p99 = NAN, avg = NAN, seconds = NAN;
  if (at == std::string::npos ||
      std::sscanf(output.c_str() + at, "sluice-perf-mpi rtt_p50_us %lf rtt_p99_us %lf rtt_avg_us %lf seconds %lf", &p50,
                  &p99, &avg, &seconds) != 4 ||
      !(seconds > 0)) {
    return std::nullopt;
  }
  Figures f;
  auto size = static_cast<double>(c.size);
  if (t.mpi == MpiPattern::kStream || t.mpi == MpiPattern::kWindow) {
    f.rate = c.iters / seconds;
    if (t.mpi == MpiPattern::kStream) f.bw_mbps = size * c.iters / seconds / 1e6;
    return f;
  }
  double scale = t.mpi == MpiPattern::kOneWay ? 0.5 : 1.0;
  f.lat_p50_us = p50 * scale;
  f.lat_p99_us = p99 * scale;
  f.lat_avg_us = avg * scale;
  f.rate = 1e6 / avg;
  f.bw_mbps = size / f.lat_avg_us;
  return f;
}

// Collects `fd`'s output until it closes or `deadline`; false at the deadline.
bool read_until(int fd, Clock::time_point deadline, std::string* out, const std::function<void()>& idle) {
  char buf[4096];
  while (Clock::now() < deadline) {
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, 10) > 0) {
      ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n == 0) return true;
      if (n > 0) out->append(buf, static_cast<std::size_t>(n));
      else if (errno != EINTR && errno != EAGAIN) return true;
    }
    if (idle) idle();
  }
  return false;
}

}  // namespace

const char* pml_name(Pml pml) { return pml == Pml::kOb1 ? "ob1" : "ucx"; }

ChildOutput run_child(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                      std::chrono::seconds timeout, const std::function<void()>& idle) {
  std::vector<std::string> a = argv, e = env;
  auto ap = pointers(a), ep = pointers(e);
  ChildOutput r;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    r.output = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  pid_t pid = ::fork();
  if (pid == 0) exec_child(fds[1], ap.data(), ep.data());
  ::close(fds[1]);
  if (pid < 0) {
    r.output = std::string("fork: ") + std::strerror(errno);
    ::close(fds[0]);
    return r;
  }
  ::setpgid(pid, pid);  // as the child does: whichever runs first
  if (!read_until(fds[0], Clock::now() + timeout, &r.output, idle)) {
    r.timed_out = true;
    ::kill(-pid, SIGTERM);  // mpirun takes its ranks down with it
    if (!read_until(fds[0], Clock::now() + std::chrono::seconds(3), &r.output, idle)) ::kill(-pid, SIGKILL);
  }
  ::close(fds[0]);
  while (::waitpid(pid, &r.status, 0) < 0 && errno == EINTR) {}
  if (r.timed_out) ::kill(-pid, SIGKILL);  // anything of its group still there
  return r;
}

MpiBaseline::MpiBaseline(const Options& o)
    : mpirun_(find_program(o.mpirun)), timeout_(o.mpi_timeout), offset_(o.offset) {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  auto beside = self.parent_path() / kProgram;
  if (!ec && ::access(beside.c_str(), X_OK) == 0) program_ = beside.string();
  if (mpirun_.empty()) missing_ = o.mpirun + " not found" + (o.mpirun.find('/') == std::string::npos ? " on PATH" : "");
  else if (program_.empty())
    missing_ = std::string("no ") + kProgram + " beside " + self.string() + " (meson builds it where it finds MPI)";
}

std::vector<std::string> MpiBaseline::command(const Test& t, const Cmd& c, Pml pml) const {
  std::vector<std::string> a = {mpirun_, "-n", "2", "--bind-to", "core", "--mca", "pml", pml_name(pml)};
  if (pml == Pml::kOb1) a.insert(a.end(), {"--mca", "btl", "self,vader"});
  else a.insert(a.end(), {"--mca", "pml_ucx_tls", "any", "--mca", "pml_ucx_devices", "any"});
  static constexpr const char* kPatterns[] = {"", "echo", "echo", "serve", "serve", "stream", "window"};
  std::size_t there = c.size, back = c.size;
  if (t.mpi == MpiPattern::kRead) there = 8;
  if (t.mpi == MpiPattern::kWrite) back = 8;
  a.insert(a.end(),
           {program_, kPatterns[static_cast<int>(t.mpi)], std::to_string(there), std::to_string(back),
            std::to_string(c.iters), std::to_string(c.warmup), std::to_string(c.window), std::to_string(offset_)});
  return a;
}

absl::StatusOr<Figures> MpiBaseline::run(const Test& t, const Cmd& c, Pml pml, const std::function<void()>& idle) {
  auto& failed = failed_[static_cast<int>(pml)];
  if (!failed) {
    auto f = start(t, c, pml, idle);
    if (f.ok()) return f;
    failed = f.status();
    std::fprintf(stderr, "sluice-perf: %s\n", std::string(failed->message()).c_str());
  }
  return *failed;
}

absl::StatusOr<Figures> MpiBaseline::start(const Test& t, const Cmd& c, Pml pml, const std::function<void()>& idle) {
  std::string who = std::string("pml ") + pml_name(pml);
  if (t.mpi == MpiPattern::kNone) return absl::FailedPreconditionError(who + ": this test has no MPI part");
  if (!missing_.empty()) return absl::FailedPreconditionError(who + " did not run: " + missing_);
  ChildOutput r = run_child(command(t, c, pml), job_env(), timeout_, idle);
  if (r.timed_out) {
    return absl::FailedPreconditionError(who + " did not finish within " + std::to_string(timeout_.count()) +
                                         " s (--mpi-timeout): killed");
  }
  auto f = figures_of(t, c, r.output);
  if (f && WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) return *f;
  std::string line = first_line(r.output);
  return absl::FailedPreconditionError(who + " did not run: " + (line.empty() ? "" : line + " (") + mpirun_ + " " +
                                       ending(r) + (line.empty() ? "" : ")"));
}

}  // namespace sluice::perf
