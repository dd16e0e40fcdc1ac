// sluice-perf -t crowd's processes as the parent sees them: lines on sockets, fork, wait, kill,
// and the CPU time of each (crowd.h).
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "crowd.h"

namespace sluice::perf::crowd {

std::optional<std::string> Lines::next(Clock::time_point deadline) {
  while (true) {
    std::size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    int ms = deadline == Clock::time_point::max() ? -1 : static_cast<int>(std::clamp<long>(left, 0, 1 << 30));
    pollfd p{fd_, POLLIN, 0};
    int n = ::poll(&p, 1, ms);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return std::nullopt;
    char buf[4096];
    ssize_t got = n < 0 ? -1 : ::read(fd_, buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      eof_ = true;
      return std::nullopt;
    }
    buffer_.append(buf, static_cast<std::size_t>(got));
  }
}

bool say(int fd, const std::string& line) {
  std::string out = line + "\n";
  std::size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::send(fd, out.data() + done, out.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

absl::StatusOr<Child*> Children::spawn(const std::string& what, int cpu, const std::function<void(int)>& body) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return absl::InternalError("socketpair: " + std::string(std::strerror(errno)));
  std::fflush(nullptr);
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError("fork: " + std::string(std::strerror(errno)));
  if (pid == 0) {
    ::close(sv[0]);
    for (auto& c : children_) ::close(c->lines->fd());  // the other children's ends
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);                 // never outlive the parent
    if (::getppid() != parent) std::_Exit(1);
    if (cpu >= 0) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      (void)::sched_setaffinity(0, sizeof(one), &one);
    }
    try {
      body(sv[1]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sluice-perf: crowd: %s (pid %d): %s\n", what.c_str(), static_cast<int>(::getpid()),
                   e.what());
    }
    std::_Exit(1);
  }
  ::close(sv[1]);
  children_.push_back(std::make_unique<Child>(Child{what, pid, std::make_unique<Lines>(sv[0])}));
  return children_.back().get();
}

absl::StatusOr<std::string> Children::expect(Child& c, const std::string& word, Clock::duration within) {
  auto line = c.lines->next(Clock::now() + within);
  if (!line && c.lines->eof()) return absl::UnavailableError(c.what + " ended (expected '" + word + "')");
  if (!line) return absl::DeadlineExceededError(c.what + " said nothing (expected '" + word + "')");
  if (line->rfind("error ", 0) == 0) return absl::InternalError(c.what + ": " + line->substr(6));
  if (line->rfind(word + " ", 0) != 0 && *line != word)
    return absl::InternalError(c.what + " said '" + *line + "', expected '" + word + "'");
  return line->size() > word.size() ? line->substr(word.size() + 1) : "";
}

absl::Status Children::wait(Child* c) {
  int status = 0;
  auto deadline = Clock::now() + std::chrono::seconds(30);
  pid_t got = 0;
  while ((got = ::waitpid(c->pid, &status, WNOHANG)) == 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (got != c->pid) return absl::DeadlineExceededError(c->what + " did not end");
  std::string what = c->what;
  ::close(c->lines->fd());
  std::erase_if(children_, [c](const auto& p) { return p.get() == c; });
  if (WIFSIGNALED(status))
    return absl::InternalError(what + " was killed by signal " + std::to_string(WTERMSIG(status)));
  if (WEXITSTATUS(status) != 0)
    return absl::InternalError(what + " failed (exit status " + std::to_string(WEXITSTATUS(status)) + ")");
  return absl::OkStatus();
}

void Children::kill_all() {
  for (auto& c : children_) {
    ::kill(c->pid, SIGKILL);
    ::waitpid(c->pid, nullptr, 0);
    ::close(c->lines->fd());
  }
  children_.clear();
}

double cpu_seconds(pid_t pid) {
  std::error_code ec;
  double ns = 0;
  bool any = false;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream in(task.path() / "schedstat");
    double run = 0;
    if (in >> run) ns += run, any = true;
  }
  return any ? ns / 1e9 : NAN;
}

std::vector<int> allowed_cpus() {
  cpu_set_t allowed;
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof(allowed), &allowed) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  return cpus;
}

void raise_fd_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &r);
  }
}

}  // namespace sluice::perf::crowd
