// sluice-perf's command line.
#pragma once

#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace sluice::perf {

struct Options {
  std::vector<std::string> tests;
  std::vector<std::size_t> sizes;
  int iters = 0;  // 0: per-test default
  int warmup = -1;
  int window = 0;
  int repeats = 5;
  std::string baseline = "none";
  // RPC tests: zero (the server answers from the request's own payload, no copy; above the
  // eager limit into the caller's reply buffer) or copy (reply_copy, no reply buffer).
  std::string rpc = "zero";
  std::string format = "table";
  // Where the sending side's payload buffers start within their page (placement sensitivity:
  // a copy's speed can depend on it); both Sluice and the raw baseline.
  int offset = 0;
  bool stats = false;
  int producers = 4;  // am_submit: threads handing sends to the engine through submit()
  // rank: rank 0 against rank 1 of a launcher's job. cs: client/server, over
  // Engine::listen()/connect(); the client drives (connect.h).
  std::string mode = "rank";
  bool server = false;  // cs: this process listens (without a launcher)
  std::string listen;   // cs: where the server listens [127.0.0.1:0]
  std::string connect;  // cs: the server this process connects to (without a launcher)
  // --baseline mpi: the mpirun that starts each job, and how long a job may take (mpi_baseline.h).
  std::string mpirun = "mpirun";
  int mpi_timeout = 120;
  // crowd (crowd.h): idle clients, the busy ones of each row, idle engines per process, and
  // how long each busy run and the idle CPU measurement take.
  int peers = 100;
  std::vector<int> busy = {1, 8};
  int per_process = 40;
  std::string connects = "seq";  // the idle clients connect one after another, or "all" at once
  int idle_poll = 100;           // ms between an idle process's rounds of progress(); 0: a thread per engine
  int idle_calls = 0;            // calls of each idle engine after its connect and before it quits (crowd.h)
  int seconds = 5;
};

void usage(FILE* out);
// The options, or nullopt after printing what is wrong (the caller prints usage, exits 2).
std::optional<Options> parse(int argc, char** argv);

}  // namespace sluice::perf
