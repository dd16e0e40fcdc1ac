// sluice-perf -t crowd's parent: starts the server and the clients (crowd_sides.cpp) as
// processes of its own, runs the phases and prints the rows (crowd.h).
#include "crowd.h"

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
#include <functional>
#include <numeric>
#include <sstream>
#include <thread>
#include <vector>

#include "report.h"
#include "tests.h"

namespace sluice::perf {

std::optional<std::string> crowd::Lines::next(Clock::time_point deadline) {
  while (true) {
    std::size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    auto left = deadline - Clock::now();
    int ms = deadline == Clock::time_point::max()
                 ? -1
                 : static_cast<int>(std::max<long>(0, std::chrono::ceil<std::chrono::milliseconds>(left).count()));
    pollfd p{fd_, POLLIN, 0};
    int n = ::poll(&p, 1, ms);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    char buf[4096];
    ssize_t got = ::read(fd_, buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return std::nullopt;
    buffer_.append(buf, static_cast<std::size_t>(got));
  }
}

bool crowd::say(int fd, const std::string& line) {
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

namespace {

using Seconds = std::chrono::duration<double>;

// One child process and the parent's end of its socket.
struct Child {
  std::string what;  // "the server", "idle clients 3"
  pid_t pid = -1;
  std::unique_ptr<crowd::Lines> lines;
};

// What K busy clients measured in one run.
struct BusyRun {
  double errors = 0, p50 = NAN, p99 = NAN, avg = NAN;
  std::vector<double> rates;
  double total() const { return std::accumulate(rates.begin(), rates.end(), 0.0); }
};

// Jain's fairness index: 1 when every rate is the same, 1/K when one client has it all.
double jain(const std::vector<double>& x) {
  double sum = 0, squares = 0;
  for (double v : x) sum += v, squares += v * v;
  return squares > 0 ? sum * sum / (static_cast<double>(x.size()) * squares) : NAN;
}

// CPU seconds process `pid`'s threads have run so far, to the nanosecond (the first field of
// each /proc/PID/task/TID/schedstat; /proc/PID/stat counts clock ticks, 10 ms each); NAN when
// unreadable.
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

// The open-file limit raised to its hard limit: the server holds a socket and an endpoint per
// client, and a client process many workers.
void raise_fd_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &r);
  }
}

class Crowd {
 public:
  explicit Crowd(const Options& o) : o_(o) { o_.mode = "cs"; }  // the header's and the rows' mode
  ~Crowd() { kill_all(); }

  int run();

 private:
  absl::Status start();
  absl::Status connect_idle();
  absl::StatusOr<BusyRun> run_busy(int k, std::size_t size);
  absl::Status measure_idle_cpu();
  absl::StatusOr<double> recv_hwm();
  absl::Status stop();
  Row row(int k, std::size_t size, const BusyRun& solo, const BusyRun& crowded, double hwm) const;

  // A child running `body`, bound to `cpu` (-1: wherever this process may run).
  absl::StatusOr<Child*> spawn(const std::string& what, int cpu, const std::function<void(int)>& body);
  absl::StatusOr<std::string> expect(Child& c, const std::string& word, Clock::duration within);
  void kill_all();

  Options o_;
  std::vector<std::unique_ptr<Child>> children_;
  Child* server_ = nullptr;
  Child* busy_ = nullptr;
  std::string address_;
  CrowdFigures figures_;  // the figures every row shares
};

absl::StatusOr<Child*> Crowd::spawn(const std::string& what, int cpu, const std::function<void(int)>& body) {
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
    body(sv[1]);
    std::_Exit(0);
  }
  ::close(sv[1]);
  children_.push_back(std::make_unique<Child>(Child{what, pid, std::make_unique<crowd::Lines>(sv[0])}));
  return children_.back().get();
}

// The child's next line, which must start with `word`: the rest of it.
absl::StatusOr<std::string> Crowd::expect(Child& c, const std::string& word, Clock::duration within) {
  auto line = c.lines->next(Clock::now() + within);
  if (!line) return absl::DeadlineExceededError(c.what + " said nothing (expected '" + word + "')");
  if (line->rfind("error ", 0) == 0) return absl::InternalError(c.what + ": " + line->substr(6));
  if (line->rfind(word + " ", 0) != 0 && *line != word)
    return absl::InternalError(c.what + " said '" + *line + "', expected '" + word + "'");
  return line->size() > word.size() ? line->substr(word.size() + 1) : "";
}

void Crowd::kill_all() {
  for (auto& c : children_) {
    if (c->pid > 0) ::kill(c->pid, SIGKILL), ::waitpid(c->pid, nullptr, 0);
    ::close(c->lines->fd());
  }
  children_.clear();
}

// The server, then the busy clients (all of --busy's largest K), connected.
absl::Status Crowd::start() {
  raise_fd_limit();
  // The server and the busy clients on two CPUs of their own, when there are two: sharing one,
  // a client that polls leaves the server a time slice now and then (hundreds of calls per
  // second instead of a hundred thousand). The idle clients run anywhere.
  cpu_set_t allowed;
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof(allowed), &allowed) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  int server_cpu = cpus.size() >= 2 ? cpus.back() : -1, busy_cpu = cpus.size() >= 2 ? cpus.front() : -1;
  SLUICE_ASSIGN_OR_RETURN(server_, spawn("the server", server_cpu, [](int fd) { crowd::serve(fd); }));
  SLUICE_ASSIGN_OR_RETURN(std::string port, expect(*server_, "port", std::chrono::seconds(30)));
  address_ = "127.0.0.1:" + port;
  int most = *std::max_element(o_.busy.begin(), o_.busy.end());
  SLUICE_ASSIGN_OR_RETURN(busy_, spawn("the busy clients", busy_cpu, [&](int fd) { crowd::busy(fd, address_, most); }));
  return expect(*busy_, "connected", std::chrono::seconds(30 + 10 * most)).status();
}

// The idle clients, a process of --per-process engines after another, each connecting its
// engines one after another: the connects are sequential, and their times add up.
absl::Status Crowd::connect_idle() {
  figures_.connect_s = figures_.connect_max_s = 0;
  for (int done = 0, n = 0; done < o_.peers; done += n) {
    n = std::min(o_.per_process, o_.peers - done);
    std::string what = "idle clients " + std::to_string(done) + "-" + std::to_string(done + n - 1);
    SLUICE_ASSIGN_OR_RETURN(Child * c, spawn(what, -1, [&](int fd) { crowd::idle(fd, address_, n); }));
    SLUICE_ASSIGN_OR_RETURN(std::string line, expect(*c, "connected", std::chrono::seconds(60 + 11 * n)));
    int ok = 0, failed = 0;
    double seconds = 0, max_seconds = 0;
    std::istringstream(line) >> ok >> failed >> seconds >> max_seconds;
    figures_.connect_s += seconds;
    figures_.connect_max_s = std::max(figures_.connect_max_s, max_seconds);
    figures_.failed_connects += failed;
  }
  return absl::OkStatus();
}

absl::StatusOr<BusyRun> Crowd::run_busy(int k, std::size_t size) {
  char cmd[128];
  int window = o_.window ? o_.window : find_test("crowd")->window;
  std::snprintf(cmd, sizeof(cmd), "run %d %zu %d %d", k, size, window, o_.seconds);
  if (!crowd::say(busy_->lines->fd(), cmd)) return absl::UnavailableError("the busy clients are gone");
  SLUICE_ASSIGN_OR_RETURN(std::string line, expect(*busy_, "done", std::chrono::seconds(o_.seconds + 60)));
  std::istringstream in(line);
  BusyRun r;
  in >> r.errors >> r.p50 >> r.p99 >> r.avg;
  for (double rate; in >> rate;) r.rates.push_back(rate);
  if (static_cast<int>(r.rates.size()) != k) return absl::InternalError("the busy clients said '" + line + "'");
  return r;
}

// The server's and the idle clients' CPU over --seconds, every client idle.
absl::Status Crowd::measure_idle_cpu() {
  auto clients = [&] {
    double s = 0;
    for (auto& c : children_)
      if (c.get() != server_ && c.get() != busy_) s += cpu_seconds(c->pid);
    return s;
  };
  double server0 = cpu_seconds(server_->pid), clients0 = clients();
  auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(o_.seconds));
  double wall = Seconds(Clock::now() - t0).count();
  figures_.server_cpu = 100 * (cpu_seconds(server_->pid) - server0) / wall;
  figures_.idle_clients_cpu = 100 * (clients() - clients0) / wall;
  if (std::isnan(figures_.server_cpu)) return absl::InternalError("cannot read the server's /proc/PID/stat");
  return absl::OkStatus();
}

// The server's receive pool: high-water mark / budget so far.
absl::StatusOr<double> Crowd::recv_hwm() {
  if (!crowd::say(server_->lines->fd(), "stats")) return absl::UnavailableError("the server is gone");
  SLUICE_ASSIGN_OR_RETURN(std::string line, expect(*server_, "stats", std::chrono::seconds(10)));
  double hwm = 0, budget = 0;
  std::istringstream(line) >> hwm >> budget;
  return budget > 0 ? hwm / budget : NAN;
}

// Tells every child to quit, idle ones first (each says how many of its peers were alive),
// and waits for them.
absl::Status Crowd::stop() {
  for (auto& c : children_)
    if (c.get() != server_ && c.get() != busy_) crowd::say(c->lines->fd(), "quit");
  for (auto& c : children_) {
    if (c.get() == server_ || c.get() == busy_) continue;
    SLUICE_ASSIGN_OR_RETURN(std::string alive, expect(*c, "alive", std::chrono::seconds(30)));
    figures_.alive += std::stoi(alive);
  }
  crowd::say(busy_->lines->fd(), "quit");
  crowd::say(server_->lines->fd(), "quit");
  for (auto& c : children_) {
    int status = 0;
    auto deadline = Clock::now() + std::chrono::seconds(30);
    while (::waitpid(c->pid, &status, WNOHANG) == 0 && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (Clock::now() >= deadline) return absl::DeadlineExceededError(c->what + " did not end");
    c->pid = -1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return absl::InternalError(c->what + " failed");
  }
  return absl::OkStatus();
}

Row Crowd::row(int k, std::size_t size, const BusyRun& solo, const BusyRun& crowded, double hwm) const {
  int window = o_.window ? o_.window : find_test("crowd")->window;
  Row r{"crowd", size, static_cast<int>(crowded.total() * o_.seconds), window, {}, {}, "solo", NAN, "", o_.mode, {}};
  r.sluice.rate = crowded.total();
  r.sluice.lat_p50_us = crowded.p50, r.sluice.lat_p99_us = crowded.p99, r.sluice.lat_avg_us = crowded.avg;
  r.sluice.bw_mbps = crowded.total() * static_cast<double>(size) / 1e6;
  r.base.rate = solo.total();
  r.base.lat_p50_us = solo.p50;
  r.base.bw_mbps = solo.total() * static_cast<double>(size) / 1e6;
  r.ratio = r.sluice.rate / r.base.rate;
  r.crowd = figures_;
  r.crowd.peers = o_.peers;
  r.crowd.busy = k;
  r.crowd.fairness = jain(crowded.rates);
  r.crowd.recv_hwm = hwm;
  r.crowd.errors = static_cast<int>(solo.errors + crowded.errors);
  r.note = crowd_note(r, o_);
  return r;
}

int Crowd::run() {
  std::vector<std::pair<int, std::size_t>> runs;  // (K, size), in the order of the rows
  for (std::size_t size : o_.sizes.empty() ? std::vector<std::size_t>{8} : o_.sizes)
    for (int k : o_.busy) runs.emplace_back(k, size);
  std::vector<BusyRun> solo, crowded;
  std::vector<double> hwm;
  auto phases = [&]() -> absl::Status {
    SLUICE_RETURN_IF_ERROR(start());
    for (auto [k, size] : runs) {
      SLUICE_ASSIGN_OR_RETURN(BusyRun r, run_busy(k, size));
      solo.push_back(r);
    }
    SLUICE_RETURN_IF_ERROR(connect_idle());
    SLUICE_RETURN_IF_ERROR(measure_idle_cpu());
    for (auto [k, size] : runs) {
      SLUICE_ASSIGN_OR_RETURN(BusyRun r, run_busy(k, size));
      crowded.push_back(r);
      SLUICE_ASSIGN_OR_RETURN(double h, recv_hwm());
      hwm.push_back(h);
    }
    return stop();
  };
  absl::Status s = phases();
  if (!s.ok()) {
    std::fprintf(stderr, "sluice-perf: crowd: %s\n", s.ToString().c_str());
    kill_all();
    return 1;
  }
  print_header(o_, "a server against " + std::to_string(o_.peers) + " idle clients and busy ones, in processes");
  std::vector<Row> rows;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    rows.push_back(row(runs[i].first, runs[i].second, solo[i], crowded[i], hwm[i]));
    print_row(rows.back(), o_);
  }
  print_json(rows, o_);
  return 0;
}

}  // namespace

int run_crowd(const Options& o) { return Crowd(o).run(); }

}  // namespace sluice::perf
