// The front door's server side: listening, accepting, and a client's pre-handshake up to its
// ACCEPT or REFUSE.
#include <arpa/inet.h>
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <absl/strings/str_format.h>

#include "core/log.h"
#include "core/net.h"
#include "door/conn.h"

namespace sluice::detail {

using door::AuthMode;
using door::Kind;
using door::ProofOf;

namespace {

// The peer's address without its port: what the per-source bound counts.
std::string source_of(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, host, sizeof(host));
  if (ss.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, host, sizeof(host));
  return host;
}

// "10.0.0.7:40312", "[fe80::1]:40312".
std::string endpoint_name(const sockaddr_storage& ss, const std::string& source) {
  int port = ss.ss_family == AF_INET    ? ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port)
             : ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port)
                                        : 0;
  return format_host_port(source, port);
}

}  // namespace

absl::StatusOr<int> Door::listen(const std::string& host, int port, bool share_port) {
  if (epoll_fd_ < 0) return absl::InternalError(absl::StrFormat("epoll_create1: %s", std::strerror(errno)));
  if (listen_fd_ >= 0) return absl::FailedPreconditionError("this engine already listens");
  SLUICE_ASSIGN_OR_RETURN(Listening l, tcp_listen(host, port, share_port));
  listen_fd_ = l.fd;
  watch(epoll_fd_, l.fd, kListenTag, EPOLLIN, true);
  return l.port;
}

namespace {

bool connection_waiting(int listen_fd) {
  pollfd p{listen_fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0;
}

}  // namespace

void Door::accept_all(Clock::time_point now) {
  for (int i = 0; i < 64; ++i) {
    while (pending() >= options_.max_pending) {
      // Room is made only for a connection that waits: the newest place may be a client whose
      // hello is still on its way, accepted in this very loop.
      if (!connection_waiting(listen_fd_)) return;
      if (close_before_hello(now, nullptr, 0, Duration::zero()) == Room::kMade) continue;
      // Every place is held by a client that sent its hello: the new ones wait in the kernel's
      // backlog until one of these finishes (poll() listens again), none is closed for them.
      SLUICE_LOG_RATE_LIMITED(kInfo, "door",
                              "%u connections in handshake, all past their hello (SLUICE_HANDSHAKE_MAX): "
                              "accepting again when one finishes",
                              options_.max_pending);
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
      listen_full_ = true;
      return;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      // Out of descriptors or memory: stop accepting for a moment instead of spinning on a
      // listener that stays readable.
      SLUICE_LOG_RATE_LIMITED(kWarn, "door", "cannot accept a connection: %s; accepting again in 100 ms",
                              std::strerror(errno));
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
      listen_paused_ = true;
      listen_resume_ = now + std::chrono::milliseconds(100);
      update_deadline();
      return;
    }
    no_delay(fd);
    auto c = std::make_unique<Conn>();
    c->id = next_id_++;
    c->fd = fd;
    c->step = Conn::Step::kWantClientHello;
    c->accepted = now;
    c->deadline = options_.handshake_timeout == kInfinite
                      ? Clock::time_point::max()
                      : now + std::min<Duration>(options_.handshake_timeout, kFirstFrameTime);
    c->source = source_of(ss);
    c->name = endpoint_name(ss, c->source);
    watch(epoll_fd_, fd, kConnTag | c->id, EPOLLIN, true);
    if (accept_order_.size() > 2 * conns_.size() + 64) {  // forget ids long gone
      std::erase_if(accept_order_, [&](std::uint64_t x) { return !conns_.contains(x); });
    }
    accept_order_.push_back(c->id);
    next_deadline_ = std::min(next_deadline_, c->deadline);
    std::uint64_t id = c->id;
    conns_.emplace(id, std::move(c));
    on_conn_event(id, EPOLLIN, now);  // its hello is usually there already
    // Still without it: its address keeps at most a quarter of the places before a hello. Its
    // oldest such past kHelloGrace makes room (never the newcomer, younger than that); when
    // all are younger, the newcomer goes.
    auto it = conns_.find(id);
    if (it != conns_.end() && it->second->step == Conn::Step::kWantClientHello &&
        close_before_hello(now, &it->second->source, std::max<std::size_t>(1, options_.max_pending / 4) + 1,
                           kHelloGrace) == Room::kNone) {
      evict(*it->second, "its address holds a quarter of the places in handshake, none old enough to close");
    }
  }
}

// Closes the oldest connection that has not sent a whole CLIENT_HELLO and was accepted at least
// `min_age` ago, read once more first (its hello may be waiting): of `source` only when given,
// and only when there are `keep` or more such (of any age). A flood of silent or trickling
// connections thus turns over among themselves, and a flooding address over its own, while a
// client that sends its hello at once goes on to its proof.
Door::Room Door::close_before_hello(Clock::time_point now, const std::string* source, std::size_t keep,
                                    Duration min_age) {
  std::erase_if(accept_order_, [&](std::uint64_t x) { return !conns_.contains(x); });
  auto before_hello = [&](std::uint64_t id) {
    const Conn& c = *conns_.at(id);
    return c.step == Conn::Step::kWantClientHello && (source == nullptr || c.source == *source);
  };
  if (static_cast<std::size_t>(std::count_if(accept_order_.begin(), accept_order_.end(), before_hello)) < keep)
    return Room::kEnough;
  for (auto it = accept_order_.begin(); it != accept_order_.end(); ++it) {
    std::uint64_t id = *it;
    if (!before_hello(id) || now - conns_.at(id)->accepted < min_age) continue;
    on_conn_event(id, EPOLLIN, now);  // touches this connection only, never accept_order_
    auto c = conns_.find(id);
    if (c != conns_.end() && c->second->step != Conn::Step::kWantClientHello) continue;  // its hello was there
    if (c != conns_.end()) {
      evict(*c->second,
            source ? "its address holds a quarter of the places in handshake" : "every place in handshake is taken");
    }
    accept_order_.erase(it);
    return Room::kMade;
  }
  return Room::kNone;
}

void Door::evict(Conn& c, const char* why) {
  c_.evicted->add();
  SLUICE_LOG_RATE_LIMITED(kWarn, "door", "client %s closed before its hello: %s (SLUICE_HANDSHAKE_MAX=%u)", c.name, why,
                          options_.max_pending);
  drop(c.id);
}

void Door::refuse(Conn& c, absl::StatusCode code, const std::string& reason) {
  door::Refuse r{static_cast<std::uint16_t>(code), reason};
  c.out.clear();
  c.out_off = 0;
  door::encode(r, &c.out);
  c.step = Conn::Step::kClosing;
  c.becomes_link = false;
  // Best effort: a client that left gets nothing; one that is there gets the reason.
  if (!flush(c, epoll_fd_) || c.out.empty()) drop(c.id);
  else watch(epoll_fd_, c.fd, kConnTag | c.id, EPOLLOUT, false);  // what it sends now is not read
}

void Door::refuse_malformed(Conn& c, const std::string& what) {
  c_.bad_frames->add();
  SLUICE_LOG_RATE_LIMITED(kWarn, "door", "client %s: %s; closed", c.name, what);
  refuse(c, absl::StatusCode::kInvalidArgument, what);
}

void Door::serve_hello(Conn& c) {
  door::ClientHello hello;
  if (c.header.kind != Kind::kClientHello)
    return refuse_malformed(c, absl::StrFormat("a %s frame first", door::to_string(c.header.kind)));
  if (door::Parse p = door::decode(c.body(), &hello); p != door::Parse::kOk)
    return refuse_malformed(c, absl::StrFormat("malformed client hello: %s", door::to_string(p)));
  c.client_nonce = hello.nonce;
  c.server_nonce = door::random_nonce();
  door::ServerHello answer;
  answer.nonce = c.server_nonce;
  answer.mode = auth_on() ? options_.auth : AuthMode::kOff;
  if (auth_on()) {
    answer.has_proof = true;
    answer.proof = options_.key->prove(ProofOf::kServerHello, c.client_nonce, c.server_nonce);
  }
  door::encode(answer, &c.out);
  c.step = Conn::Step::kWantClientProof;
  if (options_.handshake_timeout != kInfinite) c.deadline = c.accepted + options_.handshake_timeout;
  if (!flush(c, epoll_fd_)) drop(c.id);
}

void Door::serve_proof(Conn& c) {
  door::Credentials cred;
  if (c.header.kind == Kind::kRefuse) return client_refused(c);
  if (c.header.kind != Kind::kClientProof)
    return refuse_malformed(c, absl::StrFormat("a %s frame instead of its proof", door::to_string(c.header.kind)));
  if (door::Parse p = door::decode(c.body(), &cred); p != door::Parse::kOk)
    return refuse_malformed(c, absl::StrFormat("malformed client proof: %s", door::to_string(p)));
  std::optional<bool> authenticated = check_proof(c, cred);
  if (!authenticated) return;  // refused
  Admission a{c.name, cred.index, cred.address, *authenticated, cred.link, std::nullopt};
  if (*authenticated) a.keys = options_.key->session_keys(c.client_nonce, c.server_nonce);
  absl::StatusOr<Admitted> admitted = owner_->admit(a);
  if (!admitted.ok()) {
    SLUICE_LOG_RATE_LIMITED(kWarn, "door", "client %s not admitted: %s", c.name, admitted.status().message());
    return refuse(c, admitted.status().code(), std::string(admitted.status().message()));
  }
  c_.accepted->add();
  send_accept(c, *admitted);
}

std::optional<bool> Door::check_proof(Conn& c, const door::Credentials& cred) {
  if (!auth_on()) return false;
  if (cred.has_proof) {
    if (options_.key->verify(cred.proof, ProofOf::kClient, c.client_nonce, c.server_nonce, cred.index, cred.address,
                             cred.link))
      return true;
    c_.refused_auth->add();
    SLUICE_LOG_RATE_LIMITED(kWarn, "door",
                            "client %s refused: its proof does not match our key "
                            "(SLUICE_AUTH_KEY_FILE differs, or a replayed handshake)",
                            c.name);
    refuse(c, absl::StatusCode::kPermissionDenied,
           "authentication failed: the client's key is not the server's (SLUICE_AUTH_KEY_FILE)");
    return std::nullopt;
  }
  if (options_.auth != AuthMode::kRequired) return false;
  c_.refused_auth->add();
  SLUICE_LOG_RATE_LIMITED(kWarn, "door", "client %s refused: no proof of the key (SLUICE_AUTH=required)", c.name);
  refuse(c, absl::StatusCode::kPermissionDenied,
         "authentication required: set SLUICE_AUTH_KEY_FILE to the server's key file");
  return std::nullopt;
}

void Door::send_accept(Conn& c, const Admitted& admitted) {
  door::Credentials ours;
  ours.index = admitted.index;
  ours.address = options_.worker_address;
  ours.link = static_cast<std::uint8_t>(admitted.link);
  if (auth_on()) {
    ours.has_proof = true;
    ours.proof =
        options_.key->prove(ProofOf::kAccept, c.client_nonce, c.server_nonce, ours.index, ours.address, ours.link);
  }
  door::encode(Kind::kAccept, ours, &c.out);
  c.step = Conn::Step::kClosing;
  c.becomes_link = true;
  c.link_index = admitted.index;
  c.link = admitted.link;
  if (!flush(c, epoll_fd_)) {
    std::uint32_t s = c.link_index;
    drop(c.id);
    owner_->link_lost(s, "closed its connection before our accept", false);
    return;
  }
  if (c.out.empty()) to_link(c, c.link_index);
  else watch(epoll_fd_, c.fd, kConnTag | c.id, EPOLLOUT, false);
}

void Door::client_refused(Conn& c) {
  door::Refuse r;
  if (door::Parse p = door::decode(c.body(), &r); p != door::Parse::kOk) {
    c_.bad_frames->add();
    SLUICE_LOG_RATE_LIMITED(kWarn, "door", "client %s: malformed refuse: %s; closed", c.name, door::to_string(p));
    return drop(c.id);
  }
  // The client's own text is not logged: only what its code means here.
  std::uint64_t suppressed = 0;
  if (r.code == static_cast<std::uint16_t>(absl::StatusCode::kPermissionDenied)) {
    c_.refused_auth->add();
    if (log_enabled(LogLevel::kWarn) && refused_log_.allow(&suppressed)) {
      log_write(LogLevel::kWarn, "door",
                absl::StrFormat("client %s refused us: %s (door.refused_auth)%s", c.name,
                                auth_on() ? "our proof does not match its key (SLUICE_AUTH_KEY_FILE differs)"
                                          : "it requires authentication (SLUICE_AUTH=required) and we have no key",
                                suppressed ? absl::StrFormat(" (%u similar lines suppressed)", suppressed) : ""));
    }
  } else {
    c_.closed_early->add();
    SLUICE_LOG_RATE_LIMITED(kInfo, "door", "client %s gave up during the handshake (%s)", c.name,
                            absl::StatusCodeToString(code_from_refuse(r.code)));
  }
  drop(c.id);
}

void Door::to_link(Conn& c, std::uint32_t index) {
  int fd = c.fd;
  door::Link link = c.link;
  c.fd = -1;
  conns_.erase(c.id);
  if (link == door::Link::kUcx) {
    add_link(index, fd);
    return;
  }
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  owner_->link_ready(index, fd);
}

}  // namespace sluice::detail
