// The front door's client side (dialer.h): a dial, from the TCP connect to the server's ACCEPT
// or REFUSE.
#include "door/dialer.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <absl/strings/str_format.h>

#include "core/net.h"
#include "door/conn.h"

namespace sluice::detail {

using door::AuthMode;
using door::Kind;
using door::ProofOf;

Dialer::Dialer(const DoorOptions& options, int epoll_fd, Counter* bad_frames, Counter* refused_auth)
    : options_(options), epoll_fd_(epoll_fd), bad_frames_(bad_frames), refused_auth_(refused_auth) {}

Dialer::~Dialer() {
  if (conn_ && conn_->fd >= 0) ::close(conn_->fd);
  if (result_ && result_->ok() && result_->value().fd >= 0) ::close(result_->value().fd);
}

absl::Status Dialer::start(const std::string& host, int port, std::uint32_t our_index, Clock::time_point deadline,
                           std::string limit) {
  if (epoll_fd_ < 0) return absl::InternalError(absl::StrFormat("epoll_create1: %s", std::strerror(errno)));
  if (conn_) return absl::FailedPreconditionError("connect() is already in progress");
  if (options_.worker_address.size() > door::kMaxAddress) {
    return absl::InternalError(
        absl::StrFormat("our UCX worker address has %u bytes, more than the %u the handshake carries",
                        options_.worker_address.size(), door::kMaxAddress));
  }
  host_ = host;
  port_ = port;
  redials_ = 0;
  jitter_.seed(static_cast<std::uint_fast32_t>(Clock::now().time_since_epoch().count()));
  our_index_ = our_index;
  limit_ = std::move(limit);
  result_.reset();
  return connect(deadline);
}

absl::Status Dialer::connect(Clock::time_point deadline) {
  SLUICE_ASSIGN_OR_RETURN(int fd, tcp_start_connect(host_, port_));
  no_delay(fd);
  conn_ = std::make_unique<DoorConn>();
  conn_->id = kDialId;
  conn_->fd = fd;
  conn_->step = DoorConn::Step::kConnecting;
  conn_->deadline = deadline;
  conn_->name = format_host_port(host_, port_);
  conn_->want_out = true;
  watch(epoll_fd_, fd, kConnTag | kDialId, EPOLLOUT, true);
  return absl::OkStatus();
}

bool Dialer::pausing() const { return conn_ && conn_->fd < 0; }

bool Dialer::before_hello() const {
  return conn_->step == DoorConn::Step::kConnecting ||
         (conn_->step == DoorConn::Step::kWantServerHello && conn_->in.empty());
}

void Dialer::closed(const std::string& why) {
  if (redial()) return;
  std::string dials = before_hello() ? absl::StrFormat(" (%d dials, each closed before its hello)", redials_ + 1) : "";
  end(absl::UnavailableError(absl::StrFormat("server %s %s during the handshake%s", conn_->name, why, dials)));
}

bool Dialer::redial() {
  if (!before_hello() || redials_ >= kMaxRedials) return false;
  DoorConn& c = *conn_;
  SLUICE_LOG_RATE_LIMITED(kInfo, "door", "server %s closed our connection before its hello (busy): dialing again",
                          c.name);
  const Duration::rep nominal = (kFirstPause * (1 << redials_)).count();
  const Duration pause(std::uniform_int_distribution<Duration::rep>(nominal / 2, nominal + nominal / 2)(jitter_));
  ++redials_;
  ::close(c.fd);
  c.fd = -1;  // pausing(): the next dial starts in expire()
  redial_at_ = Clock::now() + pause;
  return true;
}

Clock::time_point Dialer::deadline() const {
  if (!conn_) return Clock::time_point::max();
  return pausing() ? std::min(redial_at_, conn_->deadline) : conn_->deadline;
}

absl::StatusOr<Door::Dialed> Dialer::take_result() {
  if (!result_) return absl::FailedPreconditionError("no dial has ended");
  absl::StatusOr<Door::Dialed> r = std::move(*result_);
  result_.reset();
  return r;
}

void Dialer::end(absl::StatusOr<Door::Dialed> result) {
  if (!conn_) return;
  if (conn_->fd >= 0) ::close(conn_->fd);
  conn_.reset();
  result_ = std::move(result);
}

void Dialer::expire(Clock::time_point now) {
  if (pausing() && now >= redial_at_ && now < conn_->deadline) {
    Clock::time_point deadline = conn_->deadline;
    conn_.reset();
    if (absl::Status s = connect(deadline); !s.ok()) result_ = s;
    return;
  }
  if (!conn_ || now < conn_->deadline) return;
  if (pausing()) {
    return end(absl::UnavailableError(
        absl::StrFormat("server %s closed the connection during the handshake (%d dials, each closed before its hello)",
                        conn_->name, redials_)));
  }
  if (conn_->step == DoorConn::Step::kConnecting) {
    return end(
        absl::DeadlineExceededError(absl::StrFormat("no TCP connection with %s within %s", conn_->name, limit_)));
  }
  const char* missing = conn_->step == DoorConn::Step::kWantServerHello ? "sent no hello" : "did not answer our proof";
  end(absl::DeadlineExceededError(
      absl::StrFormat("no handshake with %s within %s: its front door %s", conn_->name, limit_, missing)));
}

void Dialer::on_event(std::uint32_t events) {
  if (!conn_ || pausing()) return;
  DoorConn& c = *conn_;
  if (c.step == DoorConn::Step::kConnecting) return connected();
  if ((events & EPOLLOUT) && !c.out.empty() && !flush(c, epoll_fd_)) {
    return closed("closed the connection");
  }
  if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR))) return;
  std::string why;
  switch (read_frame(c, &why)) {
    case FrameRead::kMore: return;
    case FrameRead::kClosed: return closed(why);
    case FrameRead::kBad:
      bad_frames_->add();
      return end(absl::UnavailableError(absl::StrFormat(
          "server %s sent a malformed %s (not a Sluice server, or another version of the handshake)", c.name, why)));
    case FrameRead::kFrame: break;
  }
  frame();
  if (conn_) {  // the frame is consumed: the next one starts empty
    conn_->in.clear();
    conn_->have_header = false;
  }
}

void Dialer::connected() {
  DoorConn& c = *conn_;
  int err = 0;
  socklen_t len = sizeof(err);
  ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err == ECONNRESET) return closed("reset the connection");  // accepted, then closed at once
  if (err != 0) {
    std::string why = err == ECONNREFUSED ? "connection refused (nothing listens there)" : std::strerror(err);
    return end(absl::UnavailableError(absl::StrFormat("cannot connect to %s: %s", c.name, why)));
  }
  c.client_nonce = door::random_nonce();
  door::ClientHello hello;
  hello.nonce = c.client_nonce;
  hello.has_key = auth_on();
  door::encode(hello, &c.out);
  c.step = DoorConn::Step::kWantServerHello;
  c.want_out = false;
  watch(epoll_fd_, c.fd, kConnTag | kDialId, EPOLLIN, false);
  if (!flush(c, epoll_fd_)) closed("closed the connection");
}

void Dialer::malformed(door::Parse p) {
  bad_frames_->add();
  end(absl::UnavailableError(absl::StrFormat("server %s sent a malformed %s frame: %s", conn_->name,
                                             door::to_string(conn_->header.kind), door::to_string(p))));
}

void Dialer::denied(const std::string& why) {
  DoorConn& c = *conn_;
  refused_auth_->add();
  if (c.step == DoorConn::Step::kWantServerHello) {
    // Best effort, before the close: the server learns why, instead of seeing a client leave.
    door::Refuse r{static_cast<std::uint16_t>(absl::StatusCode::kPermissionDenied), why.substr(0, 256)};
    c.out.clear();
    door::encode(r, &c.out);
    (void)::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  end(absl::PermissionDeniedError(absl::StrFormat("server %s: %s", c.name, why)));
}

void Dialer::frame() {
  DoorConn& c = *conn_;
  if (c.header.kind == Kind::kRefuse) {
    door::Refuse r;
    if (door::Parse p = door::decode(c.body(), &r); p != door::Parse::kOk) return malformed(p);
    return end(absl::Status(code_from_refuse(r.code),
                            absl::StrFormat("server %s refused the connection: %s", c.name, r.reason)));
  }
  if (c.step == DoorConn::Step::kWantServerHello) server_hello();
  else answer();  // kWantAnswer
}

void Dialer::server_hello() {
  DoorConn& c = *conn_;
  door::ServerHello hello;
  if (c.header.kind != Kind::kServerHello) return malformed(door::Parse::kBadKind);
  if (door::Parse p = door::decode(c.body(), &hello); p != door::Parse::kOk) return malformed(p);
  c.server_nonce = hello.nonce;
  c.server_mode = hello.mode;
  if (auth_on()) {
    if (hello.has_proof) {
      if (!options_.key->verify(hello.proof, ProofOf::kServerHello, c.client_nonce, c.server_nonce))
        return denied(
            "could not prove that it holds our key (SLUICE_AUTH_KEY_FILE differs, or it is not the server meant)");
      c.peer_authenticated = true;
    } else if (options_.auth == AuthMode::kRequired) {
      return denied("does not authenticate, and SLUICE_AUTH=required here");
    }
  }
  door::Credentials ours;
  ours.index = our_index_;
  ours.address = options_.worker_address;
  ours.link = options_.client_link;
  if (auth_on() && hello.mode != AuthMode::kOff) {
    ours.has_proof = true;
    ours.proof =
        options_.key->prove(ProofOf::kClient, c.client_nonce, c.server_nonce, ours.index, ours.address, ours.link);
  }
  door::encode(Kind::kClientProof, ours, &c.out);
  c.step = DoorConn::Step::kWantAnswer;
  if (!flush(c, epoll_fd_)) end(absl::UnavailableError(absl::StrFormat("server %s closed the connection", c.name)));
}

void Dialer::answer() {
  DoorConn& c = *conn_;
  door::Credentials theirs;
  if (c.header.kind != Kind::kAccept) return malformed(door::Parse::kBadKind);
  if (door::Parse p = door::decode(c.body(), &theirs); p != door::Parse::kOk) return malformed(p);
  if (c.peer_authenticated &&
      (!theirs.has_proof || !options_.key->verify(theirs.proof, ProofOf::kAccept, c.client_nonce, c.server_nonce,
                                                  theirs.index, theirs.address, theirs.link)))
    return denied("its accept does not carry the proof of our key");
  Door::Dialed d;
  d.index = theirs.index;
  d.address = theirs.address;
  d.authenticated = c.peer_authenticated;
  d.link = static_cast<door::Link>(theirs.link);
  if (c.peer_authenticated) d.keys = options_.key->session_keys(c.client_nonce, c.server_nonce);
  // The socket outlives the handshake: a UCX peer's link (the Door watches it) or the stream's
  // connection (the caller's, out of the epoll set).
  d.fd = c.fd;
  if (d.link != door::Link::kUcx) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, d.fd, nullptr);
  else watch(epoll_fd_, d.fd, kConnTag | kDialId, 0, false);  // quiet until the Door takes it
  conn_.reset();
  result_ = std::move(d);
}

}  // namespace sluice::detail
