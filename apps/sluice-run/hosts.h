// sluice-run's hosts: -H and --hostfile lists, which of them is this machine, and how a rank
// is started on another one (through the launch agent, ssh by default).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace sluice::run {

struct Host {
  std::string name;
  int slots = 1;
  bool local = false;  // this machine: its ranks are started directly
};

// "a:2,b,c:4" (slots default to 1). nullopt, with a message on stderr, when malformed.
std::optional<std::vector<Host>> parse_host_list(const std::string& list);
// One host per line: "NAME", "NAME:SLOTS" or "NAME slots=SLOTS"; # starts a comment.
std::optional<std::vector<Host>> read_hostfile(const std::string& path);

// Whether `name` is this machine: localhost, its host name, or an address of one of its
// interfaces.
bool is_local(const std::string& name);

// The IPv4 address this machine reaches `host` from (what a rank there can connect back to);
// empty when `host` cannot be resolved or routed to.
std::string address_towards(const std::string& host);

// `s` quoted for a POSIX shell: 'it'\''s'.
std::string shell_quote(const std::string& s);

// The agent's command split at spaces, then the host and one shell command line, as ssh takes
// them: AGENT... HOST COMMAND.
std::vector<std::string> agent_argv(const std::string& agent, const std::string& host, const std::string& command);

}  // namespace sluice::run
