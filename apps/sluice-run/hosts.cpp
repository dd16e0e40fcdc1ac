#include "hosts.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace sluice::run {
namespace {

std::optional<Host> parse_host(std::string item, const char* where) {
  Host h;
  // An IPv6 address goes in brackets ("[fd00::2]:4"): its colons are not the slots' one.
  std::size_t close = item[0] == '[' ? item.find(']') : 0;
  bool bad_v6 = close == std::string::npos || (close == 0 && std::count(item.begin(), item.end(), ':') > 1) ||
                (close != 0 && close + 1 < item.size() && item[close + 1] != ':');
  if (bad_v6) {
    std::fprintf(stderr, "sluice-run: %s: %s: an IPv6 address goes in brackets, [ADDRESS] or [ADDRESS]:SLOTS\n", where,
                 item.c_str());
    return std::nullopt;
  }
  std::size_t colon = item.find(':', close);
  if (colon != std::string::npos) {
    char* end = nullptr;
    long n = std::strtol(item.c_str() + colon + 1, &end, 10);
    if (*end != '\0' || n < 1 || n > 4096) {
      std::fprintf(stderr, "sluice-run: %s: %s: need HOST or HOST:SLOTS (1 to 4096 slots)\n", where, item.c_str());
      return std::nullopt;
    }
    h.slots = static_cast<int>(n);
    item.resize(colon);
  }
  if (close != 0) item = item.substr(1, close - 1);
  if (item.empty()) {
    std::fprintf(stderr, "sluice-run: %s: an empty host name\n", where);
    return std::nullopt;
  }
  h.name = item;
  h.local = is_local(item);
  return h;
}

bool resolve(const std::string& host, in_addr* out) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return false;
  *out = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  ::freeaddrinfo(res);
  return true;
}

}  // namespace

std::optional<std::vector<Host>> parse_host_list(const std::string& list) {
  std::vector<Host> hosts;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto h = parse_host(item, "-H");
    if (!h) return std::nullopt;
    hosts.push_back(*h);
  }
  if (hosts.empty()) {
    std::fprintf(stderr, "sluice-run: -H: no hosts\n");
    return std::nullopt;
  }
  return hosts;
}

std::optional<std::vector<Host>> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "sluice-run: --hostfile %s: cannot read it\n", path.c_str());
    return std::nullopt;
  }
  std::vector<Host> hosts;
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    std::stringstream ls(line);
    std::string name, extra, more;
    if (!(ls >> name)) continue;
    if (ls >> extra) {
      if (extra.rfind("slots=", 0) != 0 || name.find(':') != std::string::npos || (ls >> more)) {
        std::fprintf(stderr, "sluice-run: --hostfile %s: '%s': need NAME, NAME:SLOTS or NAME slots=SLOTS\n",
                     path.c_str(), line.c_str());
        return std::nullopt;
      }
      name += ":" + extra.substr(6);
    }
    auto h = parse_host(name, ("--hostfile " + path).c_str());
    if (!h) return std::nullopt;
    hosts.push_back(*h);
  }
  if (hosts.empty()) {
    std::fprintf(stderr, "sluice-run: --hostfile %s: no hosts\n", path.c_str());
    return std::nullopt;
  }
  return hosts;
}

bool is_local(const std::string& name) {
  if (name == "localhost" || name == "::1") return true;
  char self[256] = {};
  if (::gethostname(self, sizeof self - 1) == 0) {
    std::string me(self);
    if (name == me || name == me.substr(0, me.find('.'))) return true;
  }
  in_addr a{};
  if (!resolve(name, &a)) return false;
  if ((ntohl(a.s_addr) >> 24) == 127) return true;
  // An address of ours can be bound.
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr = a;
  bool ours = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
  ::close(fd);
  return ours;
}

std::string address_towards(const std::string& host) {
  in_addr a{};
  if (!resolve(host, &a)) return {};
  // A connected UDP socket sends nothing; its local address is the route's source.
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {};
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(9);
  sa.sin_addr = a;
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) {
    socklen_t len = sizeof(sa);
    char buf[INET_ADDRSTRLEN] = {};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0 &&
        ::inet_ntop(AF_INET, &sa.sin_addr, buf, sizeof buf) != nullptr)
      out = buf;
  }
  ::close(fd);
  return out;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

std::vector<std::string> agent_argv(const std::string& agent, const std::string& host, const std::string& command) {
  std::vector<std::string> argv;
  std::stringstream ss(agent);
  std::string word;
  while (ss >> word) argv.push_back(word);
  argv.push_back(host);
  argv.push_back(command);
  return argv;
}

}  // namespace sluice::run
