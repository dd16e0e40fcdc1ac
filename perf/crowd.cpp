// sluice-perf -t crowd's parent: starts the server and the clients (crowd_sides.cpp) as
// processes of its own, runs the rounds and prints the rows (crowd.h).
#include "crowd.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <sstream>
#include <thread>
#include <vector>

#include "report.h"
#include "tests.h"

namespace sluice::perf {
namespace {

using crowd::Child;
using crowd::Children;
using Seconds = std::chrono::duration<double>;

// What K busy clients measured in one run.
struct BusyRun {
  double errors = 0, p50 = NAN, p99 = NAN, avg = NAN;
  std::vector<double> rates;
  double total() const { return std::accumulate(rates.begin(), rates.end(), 0.0); }
};

// One round: each (K, size)'s solo runs (before the idle clients connect and after they have
// gone) and its run among the idle clients, the server's receive high-water mark after each of
// the latter, and the idle clients' figures.
struct Round {
  std::vector<BusyRun> solo, crowded, solo_after;
  std::vector<double> hwm;
  CrowdFigures figures;

  // Run i's baseline: the mean of its solo runs, which bracket the crowded one (a machine that
  // speeds up or slows down during the round moves both sides alike).
  double solo_rate(std::size_t i) const { return (solo[i].total() + solo_after[i].total()) / 2; }
  double solo_p50(std::size_t i) const { return (solo[i].p50 + solo_after[i].p50) / 2; }
};

// Jain's fairness index: 1 when every rate is the same, 1/K when one client has it all.
double jain(const std::vector<double>& x) {
  double sum = 0, squares = 0;
  for (double v : x) sum += v, squares += v * v;
  return squares > 0 ? sum * sum / (static_cast<double>(x.size()) * squares) : NAN;
}

// The median over the rounds of what `f` picks from each.
template <typename F>
double median_over(const std::vector<Round>& rounds, F f) {
  std::vector<double> v;
  v.reserve(rounds.size());
  for (const Round& r : rounds) v.push_back(f(r));
  return percentile(v, 0.5);
}

class Crowd {
 public:
  explicit Crowd(const Options& o) : o_(o) {
    o_.mode = "cs";  // the header's and the rows' mode
    for (std::size_t size : o_.sizes.empty() ? std::vector<std::size_t>{8} : o_.sizes)
      for (int k : o_.busy) runs_.emplace_back(k, size);
  }

  int run();

 private:
  absl::Status start();
  absl::Status round(Round& r);
  absl::Status connect_idle(CrowdFigures& f);
  absl::Status connected(Child& c, int n, CrowdFigures& f);
  absl::StatusOr<BusyRun> run_busy(int k, std::size_t size);
  void measure_idle_cpu(CrowdFigures& f);
  absl::StatusOr<double> recv_hwm();
  absl::Status stop_idle(CrowdFigures& f);
  absl::Status stop();
  Row row(std::size_t i, const std::vector<Round>& rounds) const;
  int window() const { return o_.window ? o_.window : find_test("crowd")->window; }

  Options o_;
  std::vector<std::pair<int, std::size_t>> runs_;  // (K, size), in the order of the rows
  Children children_;
  Child* server_ = nullptr;
  Child* busy_ = nullptr;
  std::vector<Child*> idle_;
  std::string address_;
};

// The server, then the busy clients (all of --busy's largest K), connected. The two are bound
// to a CPU each when there are two: sharing one, a client that polls leaves the server a time
// slice now and then (thousands of calls per second instead of a hundred thousand or more).
// The idle clients run anywhere.
absl::Status Crowd::start() {
  crowd::raise_fd_limit();
  std::vector<int> cpus = crowd::allowed_cpus();
  int server_cpu = cpus.size() >= 2 ? cpus.back() : -1, busy_cpu = cpus.size() >= 2 ? cpus.front() : -1;
  SLUICE_ASSIGN_OR_RETURN(server_, children_.spawn("the server", server_cpu, [](int fd) { crowd::serve(fd); }));
  SLUICE_ASSIGN_OR_RETURN(std::string port, Children::expect(*server_, "port", std::chrono::seconds(30)));
  address_ = "127.0.0.1:" + port;
  int most = *std::max_element(o_.busy.begin(), o_.busy.end());
  SLUICE_ASSIGN_OR_RETURN(
      busy_, children_.spawn("the busy clients", busy_cpu, [&](int fd) { crowd::busy(fd, address_, most); }));
  return Children::expect(*busy_, "connected", std::chrono::seconds(30 + 10 * most)).status();
}

// Solo runs, the idle clients' connects, their idle CPU, the runs among them, their exit, and
// the solo runs again.
absl::Status Crowd::round(Round& r) {
  auto solo = [&](std::vector<BusyRun>& into) -> absl::Status {
    for (auto [k, size] : runs_) {
      SLUICE_ASSIGN_OR_RETURN(BusyRun b, run_busy(k, size));
      into.push_back(b);
    }
    return absl::OkStatus();
  };
  SLUICE_RETURN_IF_ERROR(solo(r.solo));
  SLUICE_RETURN_IF_ERROR(connect_idle(r.figures));
  measure_idle_cpu(r.figures);
  for (auto [k, size] : runs_) {
    SLUICE_ASSIGN_OR_RETURN(BusyRun b, run_busy(k, size));
    r.crowded.push_back(b);
    SLUICE_ASSIGN_OR_RETURN(double h, recv_hwm());
    r.hwm.push_back(h);
  }
  SLUICE_RETURN_IF_ERROR(stop_idle(r.figures));
  return solo(r.solo_after);
}

// The idle clients, --per-process engines a process. One after another (--connects seq): a
// process after another, each connecting its engines one after another, and connect_s is the
// sum of the connects' times. All at once (--connects all): every process creates its engines,
// then all of them connect at once, and connect_s is the time from "go" until the last one is
// connected.
absl::Status Crowd::connect_idle(CrowdFigures& f) {
  f.connect_s = f.connect_max_s = 0;
  bool at_once = o_.connects == "all";
  for (int done = 0, n = 0; done < o_.peers; done += n) {
    n = std::min(o_.per_process, o_.peers - done);
    std::string what = "idle clients " + std::to_string(done) + "-" + std::to_string(done + n - 1);
    auto body = [&](int fd) { crowd::idle(fd, address_, n, at_once, o_.idle_poll, o_.idle_calls); };
    SLUICE_ASSIGN_OR_RETURN(Child * c, children_.spawn(what, -1, body));
    idle_.push_back(c);
    if (!at_once) SLUICE_RETURN_IF_ERROR(connected(*c, n, f));
  }
  if (!at_once) return absl::OkStatus();
  // Every process's engines exist before the first connect: connect_s counts connects only.
  for (Child* c : idle_)
    SLUICE_RETURN_IF_ERROR(Children::expect(*c, "ready", std::chrono::seconds(60 + o_.per_process)).status());
  auto t0 = Clock::now();
  for (Child* c : idle_)
    if (!c->say("go")) return absl::UnavailableError(c->what + " is gone");
  for (Child* c : idle_) SLUICE_RETURN_IF_ERROR(connected(*c, o_.per_process, f));
  f.connect_s = Seconds(Clock::now() - t0).count();
  return absl::OkStatus();
}

// Idle process `c`'s "connected" line (`n` engines) added to `f`.
absl::Status Crowd::connected(Child& c, int n, CrowdFigures& f) {
  SLUICE_ASSIGN_OR_RETURN(std::string line, Children::expect(c, "connected", std::chrono::seconds(60 + 11 * n)));
  int ok = 0, failed = 0;
  double seconds = 0, max_seconds = 0;
  std::istringstream(line) >> ok >> failed >> seconds >> max_seconds;
  f.connect_s += seconds;
  f.connect_max_s = std::max(f.connect_max_s, max_seconds);
  f.failed_connects += failed;
  return absl::OkStatus();
}

absl::StatusOr<BusyRun> Crowd::run_busy(int k, std::size_t size) {
  char cmd[128];
  std::snprintf(cmd, sizeof(cmd), "run %d %zu %d %d", k, size, window(), o_.seconds);
  if (!busy_->say(cmd)) return absl::UnavailableError("the busy clients are gone");
  SLUICE_ASSIGN_OR_RETURN(std::string line, Children::expect(*busy_, "done", std::chrono::seconds(o_.seconds + 60)));
  // Numbers as strtod reads them: "nan" too (no sampled call, as after a failed peer).
  std::istringstream in(line);
  std::vector<double> v;
  for (std::string word; in >> word;) v.push_back(std::strtod(word.c_str(), nullptr));
  if (static_cast<int>(v.size()) != 4 + k) return absl::InternalError("the busy clients said '" + line + "'");
  BusyRun r{v[0], v[1], v[2], v[3], std::vector<double>(v.begin() + 4, v.end())};
  return r;
}

// The server's and the idle clients' CPU over --seconds, every client idle.
void Crowd::measure_idle_cpu(CrowdFigures& f) {
  auto clients = [&] {
    double s = 0;
    for (Child* c : idle_) s += crowd::cpu_seconds(c->pid);
    return s;
  };
  double server0 = crowd::cpu_seconds(server_->pid), clients0 = clients();
  auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(o_.seconds));
  double wall = Seconds(Clock::now() - t0).count();
  f.server_cpu = 100 * (crowd::cpu_seconds(server_->pid) - server0) / wall;
  f.idle_clients_cpu = 100 * (clients() - clients0) / wall;
}

// The server's receive pool: high-water mark / budget so far.
absl::StatusOr<double> Crowd::recv_hwm() {
  if (!server_->say("stats")) return absl::UnavailableError("the server is gone");
  SLUICE_ASSIGN_OR_RETURN(std::string line, Children::expect(*server_, "stats", std::chrono::seconds(10)));
  double hwm = 0, budget = 0;
  std::istringstream(line) >> hwm >> budget;
  return budget > 0 ? hwm / budget : NAN;
}

// Tells the idle clients to quit; each says how many of its peers were still alive and how its
// calls went (after its last ones: up to 30 s each). Once all have, they close their engines
// (the closes of hundreds of engines at once take the machine for a while: no process counts
// meanwhile) and end.
absl::Status Crowd::stop_idle(CrowdFigures& f) {
  for (Child* c : idle_) c->say("quit");
  for (Child* c : idle_) {
    auto within = std::chrono::seconds(60 + 30 * o_.idle_calls);
    SLUICE_ASSIGN_OR_RETURN(std::string line, Children::expect(*c, "alive", within));
    int alive = 0, calls = 0, failed = 0;
    std::istringstream(line) >> alive >> calls >> failed;
    f.alive += alive, f.idle_calls += calls, f.idle_calls_failed += failed;
  }
  for (Child* c : idle_) c->say("close");
  for (Child* c : idle_) SLUICE_RETURN_IF_ERROR(children_.wait(c));
  idle_.clear();
  return absl::OkStatus();
}

absl::Status Crowd::stop() {
  busy_->say("quit");
  server_->say("quit");
  SLUICE_RETURN_IF_ERROR(children_.wait(busy_));
  return children_.wait(server_);
}

// Row i of runs_ from every round: medians of the rates, of their per-round ratios and
// fairness, of the connect times and CPU; the slowest connect, the highest high-water mark.
Row Crowd::row(std::size_t i, const std::vector<Round>& rounds) const {
  auto [k, size] = runs_[i];
  auto crowded = [i](auto f) { return [i, f](const Round& r) { return f(r.crowded[i]); }; };
  Row row{"crowd", size, 0, window(), {}, {}, "solo", NAN, "", o_.mode, {}};
  Figures& a = row.sluice;
  a.rate = median_over(rounds, crowded([](const BusyRun& b) { return b.total(); }));
  a.lat_p50_us = median_over(rounds, crowded([](const BusyRun& b) { return b.p50; }));
  a.lat_p99_us = median_over(rounds, crowded([](const BusyRun& b) { return b.p99; }));
  a.lat_avg_us = median_over(rounds, crowded([](const BusyRun& b) { return b.avg; }));
  a.bw_mbps = a.rate * static_cast<double>(size) / 1e6;
  row.base.rate = median_over(rounds, [i](const Round& r) { return r.solo_rate(i); });
  row.base.lat_p50_us = median_over(rounds, [i](const Round& r) { return r.solo_p50(i); });
  row.base.bw_mbps = row.base.rate * static_cast<double>(size) / 1e6;
  row.iters = static_cast<int>(a.rate * o_.seconds);
  row.ratio = median_over(rounds, [i](const Round& r) { return r.crowded[i].total() / r.solo_rate(i); });
  CrowdFigures& c = row.crowd;
  c.peers = o_.peers, c.busy = k;
  c.fairness = median_over(rounds, crowded([](const BusyRun& b) { return jain(b.rates); }));
  c.connect_s = median_over(rounds, [](const Round& r) { return r.figures.connect_s; });
  c.server_cpu = median_over(rounds, [](const Round& r) { return r.figures.server_cpu; });
  c.solo_before = median_over(rounds, [i](const Round& r) { return r.solo[i].total(); });
  c.solo_after = median_over(rounds, [i](const Round& r) { return r.solo_after[i].total(); });
  c.idle_clients_cpu = median_over(rounds, [](const Round& r) { return r.figures.idle_clients_cpu; });
  c.recv_hwm = c.connect_max_s = 0;
  c.alive = o_.peers;
  for (const Round& r : rounds) {
    c.recv_hwm = std::max(c.recv_hwm, r.hwm[i]);
    c.connect_max_s = std::max(c.connect_max_s, r.figures.connect_max_s);
    c.alive = std::min(c.alive, r.figures.alive);
    c.failed_connects += r.figures.failed_connects;
    c.idle_calls += r.figures.idle_calls;
    c.idle_calls_failed += r.figures.idle_calls_failed;
    c.errors += static_cast<int>(r.solo[i].errors + r.crowded[i].errors + r.solo_after[i].errors);
  }
  row.note = crowd_note(row, o_);
  return row;
}

int Crowd::run() {
  std::vector<Round> rounds(static_cast<std::size_t>(o_.repeats));
  auto all = [&]() -> absl::Status {
    SLUICE_RETURN_IF_ERROR(start());
    for (Round& r : rounds) SLUICE_RETURN_IF_ERROR(round(r));
    return stop();
  };
  absl::Status s;
  try {
    s = all();
  } catch (const std::exception& e) {
    s = absl::InternalError(e.what());
  }
  if (!s.ok()) {
    std::fprintf(stderr, "sluice-perf: crowd: %s\n", s.ToString().c_str());
    children_.kill_all();
    return 1;
  }
  print_header(o_, "a server against " + std::to_string(o_.peers) + " idle clients and busy ones, in processes");
  std::vector<Row> rows;
  for (std::size_t i = 0; i < runs_.size(); ++i) {
    rows.push_back(row(i, rounds));
    print_row(rows.back(), o_);
  }
  print_json(rows, o_);
  return 0;
}

}  // namespace

int run_crowd(const Options& o) { return Crowd(o).run(); }

}  // namespace sluice::perf
