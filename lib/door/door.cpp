// The front door: listener, dialer and links over non-blocking sockets in one epoll set.
#include "door/door.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <absl/strings/str_format.h>

#include "core/log.h"
#include "core/net.h"

namespace sluice::detail {

using door::AuthMode;
using door::Kind;
using door::ProofOf;

namespace {

// epoll data: what an event is about, in the top two bits.
constexpr std::uint64_t kListenTag = 1ull << 62;
constexpr std::uint64_t kConnTag = 2ull << 62;
constexpr std::uint64_t kLinkTag = 3ull << 62;
constexpr std::uint64_t kTagMask = 3ull << 62;

std::string endpoint_name(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* s = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &s->sin_addr, host, sizeof(host));
    port = ntohs(s->sin_port);
    return absl::StrFormat("%s:%d", host, port);
  }
  if (ss.ss_family == AF_INET6) {
    const auto* s = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof(host));
    port = ntohs(s->sin6_port);
  }
  return absl::StrFormat("[%s]:%d", host, port);
}

void no_delay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

absl::StatusCode code_from_refuse(std::uint16_t v) {
  return v == 0 || v > 16 ? absl::StatusCode::kUnknown : static_cast<absl::StatusCode>(v);
}

}  // namespace

// A connection in its pre-handshake, on either side.
struct Door::Conn {
  enum class Step : std::uint8_t {
    kConnecting,       // client: TCP connect in progress
    kWantClientHello,  // server
    kWantClientProof,  // server
    kWantServerHello,  // client
    kWantAnswer,       // client: ACCEPT or REFUSE
    kClosing,          // server: ACCEPT or REFUSE being written, then link or close
  };
  std::uint64_t id = 0;
  int fd = -1;
  bool client = false;
  Step step = Step::kWantClientHello;
  Clock::time_point deadline{};
  std::string name;  // the other side's address
  std::vector<std::byte> in;
  door::FrameHeader header;
  bool have_header = false;
  std::vector<std::byte> out;
  std::size_t out_off = 0;
  bool want_out = false;  // EPOLLOUT is watched
  door::Nonce client_nonce{}, server_nonce{};
  std::uint32_t our_slot = 0;          // client: ours, sent in the proof
  std::uint32_t link_slot = 0;         // server, kClosing: the slot whose link this becomes
  bool becomes_link = false;           // server, kClosing after ACCEPT
  door::Link link = door::Link::kUcx;  // server, after ACCEPT: a stream goes to the owner
  bool peer_authenticated = false;
  AuthMode server_mode = AuthMode::kOff;  // client: what the server asked for
};

Door::Door(Owner* owner, DoorOptions options, Stats* stats) : owner_(owner), options_(std::move(options)) {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  c_ = Counters{&stats->counter("door.accepted"),   &stats->counter("door.refused_auth"),
                &stats->counter("door.bad_frames"), &stats->counter("door.timed_out"),
                &stats->counter("door.evicted"),    &stats->counter("door.closed_early"),
                &stats->counter("door.links_lost")};
}

Door::~Door() {
  for (auto& [id, c] : conns_) ::close(c->fd);
  for (auto& [slot, fd] : links_) ::close(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

void Door::watch(int fd, std::uint64_t tag, std::uint32_t events, bool add) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = tag;
  ::epoll_ctl(epoll_fd_, add ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev);
}

absl::StatusOr<int> Door::listen(const std::string& host, int port) {
  if (epoll_fd_ < 0) return absl::InternalError(absl::StrFormat("epoll_create1: %s", std::strerror(errno)));
  if (listen_fd_ >= 0) return absl::FailedPreconditionError("this engine already listens");
  SLUICE_ASSIGN_OR_RETURN(Listening l, tcp_listen(host, port));
  listen_fd_ = l.fd;
  watch(l.fd, kListenTag, EPOLLIN, true);
  return l.port;
}

absl::Status Door::dial(const std::string& host, int port, std::uint32_t our_slot, Clock::time_point deadline,
                        std::string limit) {
  if (epoll_fd_ < 0) return absl::InternalError(absl::StrFormat("epoll_create1: %s", std::strerror(errno)));
  if (dial_ != 0) return absl::FailedPreconditionError("connect() is already in progress");
  std::string name = format_host_port(host, port);
  if (options_.worker_address.size() > door::kMaxAddress) {
    return absl::InternalError(
        absl::StrFormat("our UCX worker address has %u bytes, more than the %u the handshake carries",
                        options_.worker_address.size(), door::kMaxAddress));
  }
  SLUICE_ASSIGN_OR_RETURN(int fd, tcp_start_connect(host, port));
  no_delay(fd);
  auto c = std::make_unique<Conn>();
  c->id = next_id_++;
  c->fd = fd;
  c->client = true;
  c->step = Conn::Step::kConnecting;
  c->deadline = deadline;
  c->name = name;
  c->our_slot = our_slot;
  c->want_out = true;
  watch(fd, kConnTag | c->id, EPOLLOUT, true);
  dial_ = c->id;
  dial_limit_ = std::move(limit);
  dial_result_.reset();
  conns_.emplace(c->id, std::move(c));
  update_deadline();
  return absl::OkStatus();
}

absl::StatusOr<Door::Dialed> Door::take_dial_result() {
  if (!dial_result_) return absl::FailedPreconditionError("no dial has ended");
  absl::StatusOr<Dialed> r = std::move(*dial_result_);
  dial_result_.reset();
  return r;
}

void Door::close_link(std::uint32_t slot) {
  auto it = links_.find(slot);
  if (it == links_.end()) return;
  ::close(it->second);  // leaves the epoll set with its last descriptor
  links_.erase(it);
}

void Door::update_deadline() {
  next_deadline_ = listen_paused_ ? listen_resume_ : Clock::time_point::max();
  for (auto& [id, c] : conns_) next_deadline_ = std::min(next_deadline_, c->deadline);
}

bool Door::poll(Clock::time_point now) {
  if (epoll_fd_ < 0) return false;
  epoll_event evs[32];
  bool any = false;
  for (int round = 0; round < 8; ++round) {
    int n = ::epoll_wait(epoll_fd_, evs, 32, 0);
    if (n <= 0) break;
    any = true;
    for (int i = 0; i < n; ++i) {
      std::uint64_t tag = evs[i].data.u64;
      switch (tag & kTagMask) {
        case kListenTag: accept_all(now); break;
        case kConnTag: on_conn_event(tag & ~kTagMask, evs[i].events, now); break;
        case kLinkTag:
          on_link_event(static_cast<std::uint32_t>((tag & ~kTagMask) >> 32), static_cast<int>(tag & 0xffffffffu));
          break;
        default: break;
      }
    }
    if (n < 32) break;
  }
  if (now < next_deadline_) return any;
  if (listen_paused_ && now >= listen_resume_) {
    listen_paused_ = false;
    watch(listen_fd_, kListenTag, EPOLLIN, true);
  }
  std::vector<std::uint64_t> expired;
  for (auto& [id, c] : conns_)
    if (now >= c->deadline) expired.push_back(id);
  for (std::uint64_t id : expired) {
    auto it = conns_.find(id);
    if (it == conns_.end()) continue;  // gone already (a callback above dropped it)
    Conn& c = *it->second;
    if (c.client) {
      std::string step = c.step == Conn::Step::kConnecting ? "no TCP connection" : "no handshake";
      end_dial(absl::DeadlineExceededError(absl::StrFormat("%s with %s within %s", step, c.name, dial_limit_)));
      continue;
    }
    c_.timed_out->add();
    SLUICE_LOG_RATE_LIMITED(kWarn, "door", "client %s: no handshake within SLUICE_HANDSHAKE_TIMEOUT=%s; closed", c.name,
                            format_duration(options_.handshake_timeout));
    bool admitted = c.becomes_link;  // its accept could not be written in time
    std::uint32_t slot = c.link_slot;
    drop(id);
    if (admitted) owner_->link_lost(slot, "did not take our accept in time");
  }
  update_deadline();
  return true;
}

void Door::accept_all(Clock::time_point now) {
  for (int i = 0; i < 64; ++i) {
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
    // At the bound of connections in handshake, the oldest makes room: a client that
    // completes its handshake promptly gets through however many idle ones an attacker opens.
    while (conns_.size() - (dial_ != 0 ? 1 : 0) >= options_.max_pending && !accept_order_.empty()) {
      std::uint64_t oldest = accept_order_.front();
      accept_order_.pop_front();
      if (!conns_.contains(oldest)) continue;
      c_.evicted->add();
      SLUICE_LOG_RATE_LIMITED(kWarn, "door", "client %s closed: %u connections in handshake (SLUICE_HANDSHAKE_MAX)",
                              conns_.at(oldest)->name, options_.max_pending);
      drop(oldest);
    }
    no_delay(fd);
    auto c = std::make_unique<Conn>();
    c->id = next_id_++;
    c->fd = fd;
    c->step = Conn::Step::kWantClientHello;
    c->deadline = options_.handshake_timeout == kInfinite ? Clock::time_point::max() : now + options_.handshake_timeout;
    c->name = endpoint_name(ss);
    watch(fd, kConnTag | c->id, EPOLLIN, true);
    accept_order_.push_back(c->id);
    next_deadline_ = std::min(next_deadline_, c->deadline);
    conns_.emplace(c->id, std::move(c));
  }
}

void Door::drop(std::uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  // What the client sent beyond the frame we judged is read away first (a little, without
  // waiting): closing with unread bytes resets the connection, and the reset can overtake
  // the REFUSE that tells the client why.
  std::byte scratch[4096];
  for (int i = 0; i < 16 && ::recv(it->second->fd, scratch, sizeof(scratch), MSG_DONTWAIT) > 0; ++i) {}
  ::close(it->second->fd);
  conns_.erase(it);
  if (accept_order_.size() > 2 * conns_.size() + 64) {  // forget ids long gone
    std::erase_if(accept_order_, [&](std::uint64_t x) { return !conns_.contains(x); });
  }
}

void Door::end_dial(absl::StatusOr<Dialed> result) {
  if (dial_ == 0) return;
  std::uint64_t id = dial_;
  dial_ = 0;
  dial_result_ = std::make_unique<absl::StatusOr<Dialed>>(std::move(result));
  drop(id);
}

// Reads what is missing of the current frame, never beyond it: the header, then exactly the
// body length the header allows. Bytes past a frame stay in the socket for the next step.
Door::Read Door::read_frame(Conn& c, std::string* why) {
  while (true) {
    std::size_t want = c.have_header ? door::kFrameHeaderSize + c.header.body_len : door::kFrameHeaderSize;
    std::size_t have = c.in.size();
    if (have == want) {
      if (c.have_header) return Read::kFrame;
      door::Parse p = door::decode_header(c.in, &c.header);
      if (p != door::Parse::kOk) {
        *why = absl::StrFormat("frame header: %s", door::to_string(p));
        return Read::kBad;
      }
      c.have_header = true;
      continue;
    }
    c.in.resize(want);
    ssize_t n = ::recv(c.fd, c.in.data() + have, want - have, 0);
    if (n > 0) {
      c.in.resize(have + static_cast<std::size_t>(n));
      continue;
    }
    c.in.resize(have);
    if (n == 0) {
      *why = have == 0 ? "closed the connection" : "closed the connection inside a frame";
      return Read::kClosed;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return Read::kMore;
    *why = std::strerror(errno);
    return Read::kClosed;
  }
}

bool Door::flush(Conn& c) {
  while (c.out_off < c.out.size()) {
    ssize_t n = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out_off += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!c.want_out) {
        c.want_out = true;
        watch(c.fd, kConnTag | c.id, EPOLLIN | EPOLLOUT, false);
      }
      return true;
    }
    return false;  // the other side is gone
  }
  c.out.clear();
  c.out_off = 0;
  if (c.want_out) {
    c.want_out = false;
    watch(c.fd, kConnTag | c.id, EPOLLIN, false);
  }
  return true;
}

void Door::on_conn_event(std::uint64_t id, std::uint32_t events, Clock::time_point now) {
  (void)now;
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& c = *it->second;
  if (c.step == Conn::Step::kConnecting) {
    dial_connected(c);
    return;
  }
  if ((events & EPOLLOUT) && !c.out.empty()) {
    if (!flush(c)) {
      if (c.client) {
        end_dial(
            absl::UnavailableError(absl::StrFormat("server %s closed the connection during the handshake", c.name)));
        return;
      }
      bool admitted = c.becomes_link;
      std::uint32_t slot = c.link_slot;
      drop(id);
      if (admitted) owner_->link_lost(slot, "closed its connection before our accept");
      return;
    }
  }
  if (c.step == Conn::Step::kClosing) {
    if (!c.out.empty()) return;
    if (c.becomes_link) to_link(c, c.link_slot);
    else drop(id);
    return;
  }
  if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR))) return;
  std::string why;
  switch (read_frame(c, &why)) {
    case Read::kMore: return;
    case Read::kClosed:
      if (c.client) {
        end_dial(absl::UnavailableError(absl::StrFormat("server %s %s during the handshake", c.name, why)));
      } else {
        c_.closed_early->add();
        SLUICE_LOG_RATE_LIMITED(kInfo, "door", "client %s %s during the handshake", c.name, why);
        drop(id);
      }
      return;
    case Read::kBad:
      c_.bad_frames->add();
      if (c.client) {
        end_dial(
            absl::UnavailableError(absl::StrFormat("server %s sent a malformed %s (not a Sluice server, or "
                                                   "another version of the handshake)",
                                                   c.name, why)));
      } else {
        SLUICE_LOG_RATE_LIMITED(kWarn, "door", "client %s: malformed %s; closed", c.name, why);
        refuse(c, absl::StatusCode::kInvalidArgument, "malformed " + why);
      }
      return;
    case Read::kFrame: break;
  }
  if (c.client) dial_frame(c);
  else serve_frame(c);
  // The frame is consumed (or the connection gone): the next one starts empty.
  auto again = conns_.find(id);
  if (again != conns_.end()) {
    again->second->in.clear();
    again->second->have_header = false;
  }
}

void Door::refuse(Conn& c, absl::StatusCode code, const std::string& reason) {
  door::Refuse r{static_cast<std::uint16_t>(code), reason};
  c.out.clear();
  c.out_off = 0;
  door::encode(r, &c.out);
  c.step = Conn::Step::kClosing;
  c.becomes_link = false;
  // Best effort: a client that left gets nothing; one that is there gets the reason.
  if (!flush(c) || c.out.empty()) drop(c.id);
  else watch(c.fd, kConnTag | c.id, EPOLLOUT, false);  // what it sends now is not read
}

void Door::serve_frame(Conn& c) {
  std::span<const std::byte> body(c.in.data() + door::kFrameHeaderSize, c.header.body_len);
  auto bad = [&](const std::string& what) {
    c_.bad_frames->add();
    SLUICE_LOG_RATE_LIMITED(kWarn, "door", "client %s: %s; closed", c.name, what);
    refuse(c, absl::StatusCode::kInvalidArgument, what);
  };
  const bool auth_on = options_.auth != AuthMode::kOff && options_.key != nullptr;
  if (c.step == Conn::Step::kWantClientHello) {
    door::ClientHello hello;
    if (c.header.kind != Kind::kClientHello)
      return bad(absl::StrFormat("a %s frame first", door::to_string(c.header.kind)));
    if (door::Parse p = door::decode(body, &hello); p != door::Parse::kOk)
      return bad(absl::StrFormat("malformed client hello: %s", door::to_string(p)));
    c.client_nonce = hello.nonce;
    c.server_nonce = door::random_nonce();
    door::ServerHello answer;
    answer.nonce = c.server_nonce;
    answer.mode = auth_on ? options_.auth : AuthMode::kOff;
    if (auth_on) {
      answer.has_proof = true;
      answer.proof = options_.key->prove(ProofOf::kServerHello, c.client_nonce, c.server_nonce);
    }
    door::encode(answer, &c.out);
    c.step = Conn::Step::kWantClientProof;
    if (!flush(c)) drop(c.id);
    return;
  }
  // kWantClientProof
  door::Credentials cred;
  if (c.header.kind == Kind::kRefuse) return client_refused(c, body, auth_on);
  if (c.header.kind != Kind::kClientProof)
    return bad(absl::StrFormat("a %s frame instead of its proof", door::to_string(c.header.kind)));
  if (door::Parse p = door::decode(body, &cred); p != door::Parse::kOk)
    return bad(absl::StrFormat("malformed client proof: %s", door::to_string(p)));
  bool authenticated = false;
  if (auth_on) {
    if (cred.has_proof) {
      if (!options_.key->verify(cred.proof, ProofOf::kClient, c.client_nonce, c.server_nonce, cred.slot, cred.address,
                                cred.link)) {
        c_.refused_auth->add();
        SLUICE_LOG_RATE_LIMITED(kWarn, "door",
                                "client %s refused: its proof does not match our key "
                                "(SLUICE_AUTH_KEY_FILE differs, or a replayed handshake)",
                                c.name);
        return refuse(c, absl::StatusCode::kPermissionDenied,
                      "authentication failed: the client's key is not the server's (SLUICE_AUTH_KEY_FILE)");
      }
      authenticated = true;
    } else if (options_.auth == AuthMode::kRequired) {
      c_.refused_auth->add();
      SLUICE_LOG_RATE_LIMITED(kWarn, "door", "client %s refused: no proof of the key (SLUICE_AUTH=required)", c.name);
      return refuse(c, absl::StatusCode::kPermissionDenied,
                    "authentication required: set SLUICE_AUTH_KEY_FILE to the server's key file");
    }
  }
  Admission a{c.name, cred.slot, cred.address, authenticated, cred.link, std::nullopt};
  if (authenticated) a.keys = options_.key->session_keys(c.client_nonce, c.server_nonce);
  absl::StatusOr<Admitted> admitted = owner_->admit(a);
  if (!admitted.ok()) {
    SLUICE_LOG_RATE_LIMITED(kWarn, "door", "client %s not admitted: %s", c.name, admitted.status().message());
    return refuse(c, admitted.status().code(), std::string(admitted.status().message()));
  }
  c_.accepted->add();
  door::Credentials ours;
  ours.slot = admitted->slot;
  ours.address = options_.worker_address;
  ours.link = static_cast<std::uint8_t>(admitted->link);
  if (auth_on) {
    ours.has_proof = true;
    ours.proof =
        options_.key->prove(ProofOf::kAccept, c.client_nonce, c.server_nonce, ours.slot, ours.address, ours.link);
  }
  door::encode(Kind::kAccept, ours, &c.out);
  c.step = Conn::Step::kClosing;
  c.becomes_link = true;
  c.link_slot = admitted->slot;
  c.link = admitted->link;
  if (!flush(c)) {
    std::uint32_t s = c.link_slot;
    drop(c.id);
    owner_->link_lost(s, "closed its connection before our accept");
    return;
  }
  if (c.out.empty()) to_link(c, c.link_slot);
  else watch(c.fd, kConnTag | c.id, EPOLLOUT, false);
}

void Door::dial_connected(Conn& c) {
  int err = 0;
  socklen_t len = sizeof(err);
  ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    std::string why = err == ECONNREFUSED ? "connection refused (nothing listens there)" : std::strerror(err);
    end_dial(absl::UnavailableError(absl::StrFormat("cannot connect to %s: %s", c.name, why)));
    return;
  }
  c.client_nonce = door::random_nonce();
  door::ClientHello hello;
  hello.nonce = c.client_nonce;
  hello.has_key = options_.auth != AuthMode::kOff && options_.key != nullptr;
  door::encode(hello, &c.out);
  c.step = Conn::Step::kWantServerHello;
  c.want_out = false;
  watch(c.fd, kConnTag | c.id, EPOLLIN, false);
  if (!flush(c)) end_dial(absl::UnavailableError(absl::StrFormat("server %s closed the connection", c.name)));
}

void Door::client_refused(Conn& c, std::span<const std::byte> body, bool auth_on) {
  door::Refuse r;
  if (door::Parse p = door::decode(body, &r); p != door::Parse::kOk) {
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
                                auth_on ? "our proof does not match its key (SLUICE_AUTH_KEY_FILE differs)"
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

void Door::dial_frame(Conn& c) {
  std::span<const std::byte> body(c.in.data() + door::kFrameHeaderSize, c.header.body_len);
  const bool auth_on = options_.auth != AuthMode::kOff && options_.key != nullptr;
  auto malformed = [&](door::Parse p) {
    c_.bad_frames->add();
    end_dial(absl::UnavailableError(absl::StrFormat("server %s sent a malformed %s frame: %s", c.name,
                                                    door::to_string(c.header.kind), door::to_string(p))));
  };
  if (c.header.kind == Kind::kRefuse) {
    door::Refuse r;
    if (door::Parse p = door::decode(body, &r); p != door::Parse::kOk) return malformed(p);
    end_dial(absl::Status(code_from_refuse(r.code),
                          absl::StrFormat("server %s refused the connection: %s", c.name, r.reason)));
    return;
  }
  auto denied = [&](const std::string& why) {
    c_.refused_auth->add();
    if (c.step == Conn::Step::kWantServerHello) {
      // Best effort, before the close: the server learns why, instead of seeing a client leave.
      door::Refuse r{static_cast<std::uint16_t>(absl::StatusCode::kPermissionDenied), why.substr(0, 256)};
      c.out.clear();
      door::encode(r, &c.out);
      (void)::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    end_dial(absl::PermissionDeniedError(absl::StrFormat("server %s: %s", c.name, why)));
  };
  if (c.step == Conn::Step::kWantServerHello) {
    door::ServerHello hello;
    if (c.header.kind != Kind::kServerHello) return malformed(door::Parse::kBadKind);
    if (door::Parse p = door::decode(body, &hello); p != door::Parse::kOk) return malformed(p);
    c.server_nonce = hello.nonce;
    c.server_mode = hello.mode;
    if (auth_on) {
      if (hello.has_proof) {
        if (!options_.key->verify(hello.proof, ProofOf::kServerHello, c.client_nonce, c.server_nonce))
          return denied(
              "could not prove that it holds our key (SLUICE_AUTH_KEY_FILE differs, or it is not the "
              "server meant)");
        c.peer_authenticated = true;
      } else if (options_.auth == AuthMode::kRequired) {
        return denied("does not authenticate, and SLUICE_AUTH=required here");
      }
    }
    door::Credentials ours;
    ours.slot = c.our_slot;
    ours.address = options_.worker_address;
    ours.link = options_.client_link;
    if (auth_on && hello.mode != AuthMode::kOff) {
      ours.has_proof = true;
      ours.proof =
          options_.key->prove(ProofOf::kClient, c.client_nonce, c.server_nonce, ours.slot, ours.address, ours.link);
    }
    door::encode(Kind::kClientProof, ours, &c.out);
    c.step = Conn::Step::kWantAnswer;
    if (!flush(c)) end_dial(absl::UnavailableError(absl::StrFormat("server %s closed the connection", c.name)));
    return;
  }
  // kWantAnswer
  door::Credentials theirs;
  if (c.header.kind != Kind::kAccept) return malformed(door::Parse::kBadKind);
  if (door::Parse p = door::decode(body, &theirs); p != door::Parse::kOk) return malformed(p);
  if (c.peer_authenticated &&
      (!theirs.has_proof || !options_.key->verify(theirs.proof, ProofOf::kAccept, c.client_nonce, c.server_nonce,
                                                  theirs.slot, theirs.address, theirs.link)))
    return denied("its accept does not carry the proof of our key");
  Dialed d;
  d.slot = theirs.slot;
  d.address = theirs.address;
  d.authenticated = c.peer_authenticated;
  d.link = static_cast<door::Link>(theirs.link);
  if (c.peer_authenticated) d.keys = options_.key->session_keys(c.client_nonce, c.server_nonce);
  int fd = c.fd;
  std::uint64_t id = c.id;
  std::uint32_t slot = c.our_slot;
  // The socket becomes our slot's link: out of the handshake set without being closed.
  c.fd = -1;
  conns_.erase(id);
  dial_ = 0;
  if (d.link != door::Link::kUcx) {  // the connection carries the data from now on: the caller's
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    d.fd = fd;
  } else {
    add_link(slot, fd);
  }
  dial_result_ = std::make_unique<absl::StatusOr<Dialed>>(std::move(d));
}

void Door::to_link(Conn& c, std::uint32_t slot) {
  int fd = c.fd;
  door::Link link = c.link;
  c.fd = -1;
  conns_.erase(c.id);
  if (link == door::Link::kUcx) {
    add_link(slot, fd);
    return;
  }
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  owner_->link_ready(slot, fd);
}

void Door::add_link(std::uint32_t slot, int fd) {
  close_link(slot);  // the slot's previous peer is gone (its link closed when it failed)
  links_[slot] = fd;
  watch(fd, kLinkTag | (std::uint64_t{slot} << 32) | static_cast<std::uint32_t>(fd), EPOLLIN | EPOLLRDHUP, false);
}

void Door::on_link_event(std::uint32_t slot, int fd) {
  auto it = links_.find(slot);
  if (it == links_.end() || it->second != fd) return;  // closed earlier in this batch
  std::byte buf[64];
  ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  std::string why = n == 0  ? "its connection to us closed"
                    : n < 0 ? std::string("its connection failed: ") + std::strerror(errno)
                            : "sent bytes on its connection after the handshake";
  c_.links_lost->add();
  close_link(slot);
  owner_->link_lost(slot, why);
}

}  // namespace sluice::detail
