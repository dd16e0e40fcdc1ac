#include "gather.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace sluice::run {
namespace {

struct Command {
  pid_t pid = -1;
  int fd = -1;  // its standard output, until the end of it
  bool exited = false;
};

// Starts `argv` with its standard output into a pipe; pid -1 after a message.
Command start(const std::vector<std::string>& argv) {
  Command c;
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) {
    std::perror("sluice-run: pipe");
    return c;
  }
  c.pid = ::fork();
  if (c.pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);  // the launcher's blocked signals are not the command's
    ::signal(SIGPIPE, SIG_DFL);
    int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    ::dup2(p[1], 1);
    ::fcntl(1, F_SETFL, ::fcntl(1, F_GETFL) & ~O_NONBLOCK);
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "sluice-run: cannot run the launch agent %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(p[1]);
  if (c.pid < 0) {
    std::perror("sluice-run: fork");
    ::close(p[0]);
    return c;
  }
  c.fd = p[0];
  return c;
}

void end(Command& c, Gathered& g, const std::string& why) {
  if (g.error.empty()) g.error = why;
  if (c.fd >= 0) ::close(c.fd), c.fd = -1;
  if (!c.exited) {
    ::kill(c.pid, SIGKILL);
    ::waitpid(c.pid, nullptr, 0);
    c.exited = true;
  }
}

// Reads what `c` wrote; beyond `limit` bytes, only to drop it (the command goes on to its end,
// which may clean up).
void read_from(Command& c, Gathered& g, std::size_t limit) {
  char buf[65536];
  ssize_t n;
  while ((n = ::read(c.fd, buf, sizeof buf)) > 0) {
    if (g.text.size() <= limit) g.text.append(buf, std::min(static_cast<std::size_t>(n), limit + 1 - g.text.size()));
    if (g.text.size() > limit && g.error.empty()) g.error = "more than " + std::to_string(limit) + " bytes of counters";
  }
  if (n == 0 || (errno != EAGAIN && errno != EINTR)) ::close(c.fd), c.fd = -1;
}

void reap(Command& c, Gathered& g) {
  int status = 0;
  if (c.exited || ::waitpid(c.pid, &status, WNOHANG) != c.pid) return;
  c.exited = true;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    end(c, g, "the launch agent that brings its counters back failed (status " + std::to_string(status) + ")");
}

}  // namespace

std::vector<Gathered> gather_output(const std::vector<std::vector<std::string>>& argvs, std::size_t limit,
                                    std::chrono::milliseconds timeout, int stop_fd, const std::function<bool()>& stop) {
  std::vector<Gathered> out(argvs.size());
  std::vector<Command> cmds;
  cmds.reserve(argvs.size());
  for (std::size_t i = 0; i < argvs.size(); ++i) {
    cmds.push_back(start(argvs[i]));
    if (cmds[i].pid < 0) cmds[i].exited = true, out[i].error = "its launch agent could not start";
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    std::vector<pollfd> pfds{{stop_fd, POLLIN, 0}};
    bool running = false;
    for (auto& c : cmds) {
      running = running || !c.exited || c.fd >= 0;
      if (c.fd >= 0) pfds.push_back({c.fd, POLLIN, 0});
    }
    if (!running) break;
    bool late = std::chrono::steady_clock::now() >= deadline;
    bool stopped = !late && ::poll(pfds.data(), pfds.size(), 50) > 0 && (pfds[0].revents & POLLIN) && stop();
    for (std::size_t i = 0; i < cmds.size(); ++i) {
      if (late || stopped) {
        if (!cmds[i].exited || cmds[i].fd >= 0)
          end(cmds[i], out[i],
              stopped ? "stopped by a signal"
                      : "its counters did not come back within " + std::to_string(timeout.count() / 1000) + " s");
        continue;
      }
      if (cmds[i].fd >= 0) read_from(cmds[i], out[i], limit);
      reap(cmds[i], out[i]);
    }
  }
  return out;
}

}  // namespace sluice::run
