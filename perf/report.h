// sluice-perf's figures, their medians and ratios, and the table/CSV/JSON output.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "options.h"

namespace sluice::perf {

struct Test;  // tests.h

// What one run of one test measured.
struct Figures {
  double lat_p50_us = NAN, lat_p99_us = NAN, lat_avg_us = NAN, bw_mbps = NAN, rate = NAN;
  double extra = NAN;  // mixed: p999
  // fanin: the receive pool's high-water mark and budget in bytes; the messages (and their
  // bytes) that had arrived and were still unfinished when the receiver caught up.
  double recv_hwm = NAN, recv_budget = NAN, waiting = NAN, waiting_bytes = NAN;
};

// crowd's figures beside the usual ones (crowd.h); NAN and 0 in every other test's row.
struct CrowdFigures {
  int peers = 0, busy = 0;  // --peers N idle clients, K busy ones
  double fairness = NAN;    // Jain's index of the K busy clients' rates among the idle ones
  double recv_hwm = NAN;    // the server's receive pool: high-water mark / budget
  double connect_s = NAN;   // the N connects: their sum (one after another) or until the last (all at once)
  double server_cpu = NAN;  // the server's CPU time with every client idle, % of one core
  // For the note: the slowest connect, the idle clients' own CPU (% of a core, all of them),
  // how many idle clients' peers were still alive at the end, and failed calls and connects;
  // the idle clients' own calls (--idle-calls) and how many of those failed.
  double connect_max_s = NAN, idle_clients_cpu = NAN;
  int alive = 0, errors = 0, failed_connects = 0;
  int idle_calls = 0, idle_calls_failed = 0;
  // The solo rates before the idle clients connect and after they have gone (their mean is
  // the baseline).
  double solo_before = NAN, solo_after = NAN;
};

struct Row {
  std::string test;
  std::size_t size;
  int iters, window;
  Figures sluice, base;
  std::string baseline;
  double ratio = NAN;
  std::string note;
  std::string mode = "rank";  // Options::mode: rank or cs
  CrowdFigures crowd;
};

double percentile(std::vector<double> v, double p);
Figures median_of(const std::vector<Figures>& runs);
// Latency figures from round trips in seconds; `scale` 0.5 for one-way latency.
Figures from_rtts(const std::vector<double>& seconds, double scale, std::size_t size);

// -n's default for test `t` at `size` bytes.
int default_iters(const Test& t, std::size_t size);
// Sluice / baseline of the headline figure of `t`'s mode (NAN without a baseline).
double headline_ratio(const Test& t, const Row& r);
// The rows' words (Test::note). fanin: the receive pool's high-water mark against its budget,
// and the messages left waiting by the held-up receiver, beside the raw baseline's when there
// is one. mixed: the small calls' p99 with the streams running and without. am_submit: its
// producer threads.
std::string fanin_note(const Row& r, const Options& o);
std::string mixed_note(const Row& r, const Options& o);
std::string submit_note(const Row& r, const Options& o);
std::string crowd_note(const Row& r, const Options& o);
// Table and CSV: the header, then each row as it is measured. JSON: the document at the end.
// The table's header names the mode and `sides` (who runs against whom); CSV and JSON carry the
// mode in each row.
void print_header(const Options& o, const std::string& sides);
void print_row(const Row& r, const Options& o);
void print_json(const std::vector<Row>& rows, const Options& o);

}  // namespace sluice::perf
