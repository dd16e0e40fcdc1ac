// sluice-run's command line: its options and their parsing.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "hosts.h"

namespace sluice::run {

struct Options {
  int n = 0;
  std::vector<Host> hosts;    // -H or --hostfile; empty: every rank here
  std::string agent = "ssh";  // starts a rank on another host: AGENT HOST COMMAND
  std::string boot_host;      // the address remote ranks reach the service at
  std::string bind = "none";
  bool tag_output = false;
  double timeout_s = 0;
  bool stats = false;  // gather the ranks' counters at exit and print the job's
  std::vector<std::string> exports;
  std::vector<std::string> argv;
};

// The usage message, to `out`.
void usage(FILE* out);

// The options, or nullopt after a message on stderr naming what is wrong; -h prints the usage
// and exits 0.
std::optional<Options> parse_options(int argc, char** argv);

}  // namespace sluice::run
