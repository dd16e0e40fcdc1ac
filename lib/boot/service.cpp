// sluice-run's bootstrap service: fences over a private Unix socket and TCP, token-protected.
#include <sluice/bootstrap_service.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include <absl/strings/numbers.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_split.h>

#include "boot/kv.h"
#include "core/net.h"

namespace sluice {
namespace {

std::string random_hex(std::size_t bytes) {
  std::vector<unsigned char> buf(bytes);
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    std::size_t off = 0;
    while (off < bytes) {
      ssize_t n = ::read(fd, buf.data() + off, bytes - off);
      if (n <= 0) break;
      off += static_cast<std::size_t>(n);
    }
    ::close(fd);
  }
  std::string out;
  for (unsigned char c : buf) out += absl::StrFormat("%02x", c);
  return out;
}

bool same_token(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;  // constant time: no early exit on the first mismatch
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// What a connection may send before its token is checked: the frame length and the request
// line ("<token> FENCE <rank> <epoch>\n", 128 hex digits of token at most).
constexpr std::size_t kMaxRequestLine = 256;
constexpr auto kIdle = std::chrono::seconds(10);
constexpr int kReplyTimeoutMs = 10000;

class Service final : public BootstrapService {
 public:
  ~Service() override {
    for (auto& c : conns_) ::close(c.fd);
    if (listen_fd_ >= 0) ::close(listen_fd_);
    if (tcp_fd_ >= 0) ::close(tcp_fd_);
    ::unlink(address_.c_str());
    ::rmdir(dir_.c_str());
  }

  absl::Status init(int size) {
    size_ = size;
    max_unauthenticated_ = 2 * static_cast<std::size_t>(size) + 16;
    token_ = random_hex(16);
    char templ[] = "/tmp/sluice-run.XXXXXX";
    if (::mkdtemp(templ) == nullptr)
      return absl::UnavailableError(absl::StrFormat("mkdtemp: %s", std::strerror(errno)));
    dir_ = templ;
    address_ = dir_ + "/boot.sock";
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (listen_fd_ < 0) return absl::UnavailableError(absl::StrFormat("socket: %s", std::strerror(errno)));
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, address_.data(), address_.size());
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || ::listen(listen_fd_, 128) != 0) {
      return absl::UnavailableError(absl::StrFormat("bootstrap socket %s: %s", address_, std::strerror(errno)));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int> listen_tcp(const std::string& ip, int port) override {
    SLUICE_ASSIGN_OR_RETURN(detail::Listening l, detail::tcp_listen(ip, port));
    tcp_fd_ = l.fd;
    return l.port;
  }

  const std::string& address() const override { return address_; }
  const std::string& token() const override { return token_; }
  int rejected() const override { return rejected_; }
  int closed_unserved() const override { return closed_unserved_; }

  std::vector<int> fds() const override {
    std::vector<int> out{listen_fd_};
    if (tcp_fd_ >= 0) out.push_back(tcp_fd_);
    for (const auto& c : conns_)
      if (!c.waiting) out.push_back(c.fd);
    return out;
  }

  void handle() override {
    auto now = std::chrono::steady_clock::now();
    for (int lfd : {listen_fd_, tcp_fd_}) {
      while (lfd >= 0) {
        int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        timeval tv{kReplyTimeoutMs / 1000, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        conns_.push_back(Conn{fd, {}, false, false, -1, -1, now});
      }
    }
    for (std::size_t i = 0; i < conns_.size();) {
      Conn& c = conns_[i];
      bool keep = c.waiting || read_some(c, now);
      if (keep && !c.waiting && now - c.last_input > kIdle) {
        unserved("a connection sent nothing for 10 s");
        keep = false;
      }
      if (!keep) {
        close_conn(i);
        continue;
      }
      ++i;
    }
    evict_unauthenticated();
  }

 private:
  struct Conn {
    int fd;
    std::string in;
    bool authenticated = false;  // its request line carried the token
    bool waiting = false;        // a complete fence request is waiting for the other ranks
    int rank = -1, epoch = -1;
    std::chrono::steady_clock::time_point last_input;
  };

  // Reads what is there; returns false when the connection should be closed.
  bool read_some(Conn& c, std::chrono::steady_clock::time_point now) {
    char buf[65536];
    while (true) {
      // Before the token is checked, no more than the request line is read.
      std::size_t room = c.authenticated ? sizeof(buf) : 4 + kMaxRequestLine - c.in.size();
      if (room == 0) break;
      ssize_t n = ::read(c.fd, buf, std::min(room, sizeof(buf)));
      if (n > 0) {
        c.last_input = now;
        c.in.append(buf, static_cast<std::size_t>(n));
        if (c.in.size() > detail::kMaxBootMessage + 4) return reject(c, "request too large");
        if (!c.authenticated && !check_request_line(c)) return false;
        continue;
      }
      if (n == 0) return false;
      if (errno == EINTR) continue;
      break;  // EAGAIN
    }
    if (!c.authenticated) return true;  // its request line is not complete yet
    std::string_view v = c.in;
    std::uint32_t len = 0;
    detail::get_u32(&v, &len);
    if (v.size() < len) return true;
    std::string_view body = v.substr(0, len);
    std::string_view blob = body.substr(body.find('\n') + 1);
    if (auto kv = detail::decode_kv(blob); !kv.ok())
      return reject(c, absl::StrFormat("malformed key-value blob: %s", kv.status().message()));
    int rank = c.rank, epoch = c.epoch;
    int expected = next_epoch_[rank] + 1;
    if (epoch != expected)
      return reject(c, absl::StrFormat("rank %d sent fence %d, expected %d", rank, epoch, expected));
    auto& slots = pending_[epoch];
    if (slots.empty()) slots.resize(static_cast<std::size_t>(size_));
    if (slots[static_cast<std::size_t>(rank)]) return reject(c, "duplicate fence");
    slots[static_cast<std::size_t>(rank)] = std::string(blob);
    next_epoch_[rank] = epoch;
    c.waiting = true;
    c.in.clear();
    complete_if_ready(epoch);
    return true;
  }

  // Checks the frame length and, once it is complete, the request line and its token (then
  // the connection is authenticated). False when the connection was rejected.
  bool check_request_line(Conn& c) {
    if (c.in.size() < 4) return true;
    std::string_view v = c.in;
    std::uint32_t len = 0;
    detail::get_u32(&v, &len);
    if (len > detail::kMaxBootMessage) return reject(c, "frame length above the limit");
    std::size_t nl = v.find('\n');
    if (nl == std::string_view::npos) {
      if (v.size() >= std::min<std::size_t>(len, kMaxRequestLine))
        return reject(c, "no request line in the first 256 bytes");
      return true;
    }
    if (nl >= len) return reject(c, "malformed request");
    std::vector<absl::string_view> f = absl::StrSplit(absl::string_view(v.data(), nl), ' ');
    if (f.size() != 4) return reject(c, "malformed request");
    if (!same_token({f[0].data(), f[0].size()}, token_)) return reject(c, "wrong token");
    // Only once the token is shown does the reply say more than "malformed".
    if (f[1] != "FENCE") return reject(c, absl::StrFormat("unknown request '%s'", f[1]));
    int rank = -1, epoch = -1;  // SimpleAtoi fails on overflow: 2^32 + 1 is not rank 1
    if (!absl::SimpleAtoi(f[2], &rank) || rank < 0 || rank >= size_)
      return reject(c, absl::StrFormat("rank '%s' is not in [0, %d)", f[2], size_));
    if (!absl::SimpleAtoi(f[3], &epoch)) return reject(c, absl::StrFormat("fence '%s' is not a number", f[3]));
    c.authenticated = true;
    c.rank = rank;
    c.epoch = epoch;
    return true;
  }

  // Every connection was read, so a rank's fresh one has shown its token: only connections
  // that have not are bounded, and those idle longest are closed first.
  void evict_unauthenticated() {
    std::vector<std::size_t> idle;
    for (std::size_t i = 0; i < conns_.size(); ++i)
      if (!conns_[i].authenticated && !conns_[i].waiting) idle.push_back(i);
    if (idle.size() <= max_unauthenticated_) return;
    std::size_t excess = idle.size() - max_unauthenticated_;
    std::stable_sort(idle.begin(), idle.end(),
                     [&](std::size_t a, std::size_t b) { return conns_[a].last_input < conns_[b].last_input; });
    idle.resize(excess);
    std::sort(idle.rbegin(), idle.rend());  // erase from the back: the other indices stay valid
    for (std::size_t i : idle) close_conn(i);
    unserved(absl::StrFormat("too many connections without a token (at most %d; the longest idle go first)",
                             max_unauthenticated_),
             static_cast<int>(excess));
  }

  void close_conn(std::size_t i) {
    ::close(conns_[i].fd);
    conns_.erase(conns_.begin() + static_cast<long>(i));
  }

  void complete_if_ready(int epoch) {
    auto& slots = pending_[epoch];
    for (const auto& s : slots)
      if (!s) return;
    std::string reply = "OK\n";
    for (int r = 0; r < size_; ++r) {
      detail::put_u32(&reply, static_cast<std::uint32_t>(r));
      detail::put_u32(&reply, static_cast<std::uint32_t>(slots[static_cast<std::size_t>(r)]->size()));
      reply += *slots[static_cast<std::size_t>(r)];
    }
    for (auto& c : conns_) {
      if (c.waiting && next_epoch_[c.rank] == epoch) {
        // Blocking write of the reply (ranks read it at once), bounded by SO_SNDTIMEO.
        int flags = ::fcntl(c.fd, F_GETFL);
        ::fcntl(c.fd, F_SETFL, flags & ~O_NONBLOCK);
        (void)detail::write_frame(c.fd, reply);
        ::fcntl(c.fd, F_SETFL, flags);
        c.waiting = false;
        c.authenticated = false;  // a next request on it is checked again
        c.last_input = std::chrono::steady_clock::now();
      }
    }
    pending_.erase(epoch);
  }

  bool reject(Conn& c, const std::string& why) {
    ++rejected_;
    std::fprintf(stderr, "sluice-run: rejected a bootstrap request: %s\n", why.c_str());
    int flags = ::fcntl(c.fd, F_GETFL);
    ::fcntl(c.fd, F_SETFL, flags & ~O_NONBLOCK);
    (void)detail::write_frame(c.fd, "ERR " + why + "\n");
    return false;
  }

  // `n` connections closed without being served; said at most once a second.
  void unserved(const std::string& why, int n = 1) {
    closed_unserved_ += n;
    auto now = std::chrono::steady_clock::now();
    if (now - last_said_ < std::chrono::seconds(1)) return;
    last_said_ = now;
    std::fprintf(stderr, "sluice-run: closed a bootstrap connection: %s (%d so far)\n", why.c_str(), closed_unserved_);
  }

  int size_ = 0;
  std::size_t max_unauthenticated_ = 0;
  std::string token_, dir_, address_;
  int listen_fd_ = -1, tcp_fd_ = -1;
  std::vector<Conn> conns_;
  std::map<int, int> next_epoch_;  // rank -> last fence epoch
  std::map<int, std::vector<std::optional<std::string>>> pending_;
  int rejected_ = 0, closed_unserved_ = 0;
  std::chrono::steady_clock::time_point last_said_{};
};

}  // namespace

absl::StatusOr<std::unique_ptr<BootstrapService>> BootstrapService::create(int size) {
  auto s = std::make_unique<Service>();
  SLUICE_RETURN_IF_ERROR(s->init(size));
  return std::unique_ptr<BootstrapService>(std::move(s));
}

}  // namespace sluice
