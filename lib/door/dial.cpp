// The front door's client side: a dial, from the TCP connect to the server's ACCEPT or REFUSE.
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

absl::Status Door::dial(const std::string& host, int port, std::uint32_t our_index, Clock::time_point deadline,
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
  c->our_index = our_index;
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

void Door::end_dial(absl::StatusOr<Dialed> result) {
  if (dial_ == 0) return;
  std::uint64_t id = dial_;
  dial_ = 0;
  dial_result_ = std::make_unique<absl::StatusOr<Dialed>>(std::move(result));
  drop(id);
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
  hello.has_key = auth_on();
  door::encode(hello, &c.out);
  c.step = Conn::Step::kWantServerHello;
  c.want_out = false;
  watch(c.fd, kConnTag | c.id, EPOLLIN, false);
  if (!flush(c)) end_dial(absl::UnavailableError(absl::StrFormat("server %s closed the connection", c.name)));
}

void Door::dial_malformed(Conn& c, door::Parse p) {
  c_.bad_frames->add();
  end_dial(absl::UnavailableError(absl::StrFormat("server %s sent a malformed %s frame: %s", c.name,
                                                  door::to_string(c.header.kind), door::to_string(p))));
}

void Door::dial_denied(Conn& c, const std::string& why) {
  c_.refused_auth->add();
  if (c.step == Conn::Step::kWantServerHello) {
    // Best effort, before the close: the server learns why, instead of seeing a client leave.
    door::Refuse r{static_cast<std::uint16_t>(absl::StatusCode::kPermissionDenied), why.substr(0, 256)};
    c.out.clear();
    door::encode(r, &c.out);
    (void)::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  end_dial(absl::PermissionDeniedError(absl::StrFormat("server %s: %s", c.name, why)));
}

void Door::dial_frame(Conn& c) {
  if (c.header.kind == Kind::kRefuse) {
    door::Refuse r;
    if (door::Parse p = door::decode(c.body(), &r); p != door::Parse::kOk) return dial_malformed(c, p);
    end_dial(absl::Status(code_from_refuse(r.code),
                          absl::StrFormat("server %s refused the connection: %s", c.name, r.reason)));
    return;
  }
  if (c.step == Conn::Step::kWantServerHello) dial_server_hello(c);
  else dial_answer(c);  // kWantAnswer
}

void Door::dial_server_hello(Conn& c) {
  door::ServerHello hello;
  if (c.header.kind != Kind::kServerHello) return dial_malformed(c, door::Parse::kBadKind);
  if (door::Parse p = door::decode(c.body(), &hello); p != door::Parse::kOk) return dial_malformed(c, p);
  c.server_nonce = hello.nonce;
  c.server_mode = hello.mode;
  if (auth_on()) {
    if (hello.has_proof) {
      if (!options_.key->verify(hello.proof, ProofOf::kServerHello, c.client_nonce, c.server_nonce))
        return dial_denied(c,
                           "could not prove that it holds our key (SLUICE_AUTH_KEY_FILE differs, or it is not the "
                           "server meant)");
      c.peer_authenticated = true;
    } else if (options_.auth == AuthMode::kRequired) {
      return dial_denied(c, "does not authenticate, and SLUICE_AUTH=required here");
    }
  }
  door::Credentials ours;
  ours.index = c.our_index;
  ours.address = options_.worker_address;
  ours.link = options_.client_link;
  if (auth_on() && hello.mode != AuthMode::kOff) {
    ours.has_proof = true;
    ours.proof =
        options_.key->prove(ProofOf::kClient, c.client_nonce, c.server_nonce, ours.index, ours.address, ours.link);
  }
  door::encode(Kind::kClientProof, ours, &c.out);
  c.step = Conn::Step::kWantAnswer;
  if (!flush(c)) end_dial(absl::UnavailableError(absl::StrFormat("server %s closed the connection", c.name)));
}

void Door::dial_answer(Conn& c) {
  door::Credentials theirs;
  if (c.header.kind != Kind::kAccept) return dial_malformed(c, door::Parse::kBadKind);
  if (door::Parse p = door::decode(c.body(), &theirs); p != door::Parse::kOk) return dial_malformed(c, p);
  if (c.peer_authenticated &&
      (!theirs.has_proof || !options_.key->verify(theirs.proof, ProofOf::kAccept, c.client_nonce, c.server_nonce,
                                                  theirs.index, theirs.address, theirs.link)))
    return dial_denied(c, "its accept does not carry the proof of our key");
  Dialed d;
  d.index = theirs.index;
  d.address = theirs.address;
  d.authenticated = c.peer_authenticated;
  d.link = static_cast<door::Link>(theirs.link);
  if (c.peer_authenticated) d.keys = options_.key->session_keys(c.client_nonce, c.server_nonce);
  int fd = c.fd;
  std::uint64_t id = c.id;
  std::uint32_t index = c.our_index;
  // The socket becomes our index's link: out of the handshake set without being closed.
  c.fd = -1;
  conns_.erase(id);
  dial_ = 0;
  if (d.link != door::Link::kUcx) {  // the connection carries the data from now on: the caller's
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    d.fd = fd;
  } else {
    add_link(index, fd);
  }
  dial_result_ = std::make_unique<absl::StatusOr<Dialed>>(std::move(d));
}

}  // namespace sluice::detail
