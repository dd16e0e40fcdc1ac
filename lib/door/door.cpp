// The front door's machinery shared by both sides: the epoll set and its events, reading and
// writing frames, connections' deadlines, and the links a finished handshake leaves. The server
// side is in serve.cpp, the client side in dial.cpp.
#include "door/door.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <absl/strings/str_format.h>

#include "core/log.h"
#include "core/net.h"
#include "door/conn.h"
#include "door/dialer.h"

namespace sluice::detail {

Door::Door(Owner* owner, DoorOptions options, Stats* stats) : owner_(owner), options_(std::move(options)) {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  c_ = Counters{&stats->counter("door.accepted"),   &stats->counter("door.refused_auth"),
                &stats->counter("door.bad_frames"), &stats->counter("door.timed_out"),
                &stats->counter("door.evicted"),    &stats->counter("door.closed_early"),
                &stats->counter("door.links_lost")};
  dialer_ = std::make_unique<Dialer>(options_, epoll_fd_, c_.bad_frames, c_.refused_auth);
}

Door::~Door() {
  dialer_.reset();
  for (auto& [id, c] : conns_) ::close(c->fd);
  for (auto& [index, link] : links_) ::close(link.fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

void Door::close_link(std::uint32_t index, bool goodbye) {
  auto it = links_.find(index);
  if (it == links_.end()) return;
  // Best effort: a link whose peer is gone, or whose buffer is full, just closes.
  if (goodbye) (void)::send(it->second.fd, &door::kLinkGoodbye, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  ::close(it->second.fd);  // leaves the epoll set with its last descriptor
  links_.erase(it);
}

void Door::update_deadline() {
  next_deadline_ = std::min(listen_paused_ ? listen_resume_ : Clock::time_point::max(), dialer_->deadline());
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
        case kConnTag:
          if ((tag & ~kTagMask) == kDialId) dialer_->on_event(evs[i].events);
          else on_conn_event(tag & ~kTagMask, evs[i].events, now);
          break;
        case kLinkTag:
          on_link_event(static_cast<std::uint32_t>((tag & ~kTagMask) >> 32), static_cast<int>(tag & 0xffffffffu));
          break;
        default: break;
      }
    }
    if (n < 32) break;
  }
  listen_if_room();
  next_deadline_ = std::min(next_deadline_, dialer_->deadline());  // a shed dial's pause
  if (now < next_deadline_) return any;
  if (listen_paused_ && now >= listen_resume_) {
    listen_paused_ = false;
    if (!listen_full_) watch(epoll_fd_, listen_fd_, kListenTag, EPOLLIN, true);
  }
  dialer_->expire(now);
  std::vector<std::uint64_t> expired;
  for (auto& [id, c] : conns_)
    if (now >= c->deadline) expired.push_back(id);
  for (std::uint64_t id : expired) {
    auto it = conns_.find(id);
    if (it == conns_.end()) continue;  // gone already (a callback above dropped it)
    Conn& c = *it->second;
    c_.timed_out->add();
    if (c.step == Conn::Step::kWantClientHello) {
      SLUICE_LOG_RATE_LIMITED(kWarn, "door", "client %s: no whole CLIENT_HELLO within %s of its first bytes; closed",
                              c.name, format_duration(std::min<Duration>(options_.handshake_timeout, kFirstFrameTime)));
    } else {
      SLUICE_LOG_RATE_LIMITED(kWarn, "door", "client %s: no handshake within SLUICE_HANDSHAKE_TIMEOUT=%s; closed",
                              c.name, format_duration(options_.handshake_timeout));
    }
    bool admitted = c.becomes_link;  // its accept could not be written in time
    std::uint32_t index = c.link_index;
    drop(id);
    if (admitted) owner_->link_lost(index, "did not take our accept in time", false);
  }
  listen_if_room();
  update_deadline();
  return true;
}

void Door::listen_if_room() {
  if (!listen_full_ || pending() >= options_.max_pending) return;
  listen_full_ = false;
  if (!listen_paused_) watch(epoll_fd_, listen_fd_, kListenTag, EPOLLIN, true);
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
}

void Door::on_conn_event(std::uint64_t id, std::uint32_t events, Clock::time_point now) {
  (void)now;
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& c = *it->second;
  if ((events & EPOLLOUT) && !c.out.empty()) {
    if (!flush(c, epoll_fd_)) {
      bool admitted = c.becomes_link;
      std::uint32_t index = c.link_index;
      drop(id);
      if (admitted) owner_->link_lost(index, "closed its connection before our accept", false);
      return;
    }
  }
  if (c.step == Conn::Step::kClosing) {
    if (!c.out.empty()) return;
    if (c.becomes_link) to_link(c, c.link_index);
    else drop(id);
    return;
  }
  if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR))) return;
  std::string why;
  switch (read_frame(c, &why)) {
    case FrameRead::kMore: return;
    case FrameRead::kClosed:
      c_.closed_early->add();
      SLUICE_LOG_RATE_LIMITED(kInfo, "door", "client %s %s during the handshake", c.name, why);
      drop(id);
      return;
    case FrameRead::kBad:
      c_.bad_frames->add();
      SLUICE_LOG_RATE_LIMITED(kWarn, "door", "client %s: malformed %s; closed", c.name, why);
      refuse(c, absl::StatusCode::kInvalidArgument, "malformed " + why);
      return;
    case FrameRead::kFrame: break;
  }
  if (c.step == Conn::Step::kWantClientHello) serve_hello(c);
  else serve_proof(c);  // kWantClientProof
  // The frame is consumed (or the connection gone): the next one starts empty.
  auto again = conns_.find(id);
  if (again != conns_.end()) {
    again->second->in.clear();
    again->second->have_header = false;
  }
}

void Door::add_link(std::uint32_t index, int fd) {
  close_link(index);  // the index's previous peer is gone (its link closed when it failed)
  links_[index] = Link{fd, false};
  watch(epoll_fd_, fd, kLinkTag | (std::uint64_t{index} << 32) | static_cast<std::uint32_t>(fd), EPOLLIN | EPOLLRDHUP,
        false);
}

void Door::on_link_event(std::uint32_t index, int fd) {
  auto it = links_.find(index);
  if (it == links_.end() || it->second.fd != fd) return;  // closed earlier in this batch
  std::byte buf[64];
  ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  bool goodbye = it->second.goodbye;
  if (n == 1 && buf[0] == door::kLinkGoodbye && !goodbye) {
    it->second.goodbye = true;  // its close follows
    return;
  }
  std::string why = n <= 0    ? connection_ended(n == 0 ? 0 : errno)
                    : goodbye ? "sent bytes on its connection after its goodbye"
                              : "sent bytes on its connection after the handshake";
  c_.links_lost->add();
  close_link(index);
  owner_->link_lost(index, why, goodbye && n <= 0);
}

absl::Status Door::dial(const std::string& host, int port, std::uint32_t our_index, Clock::time_point deadline,
                        std::string limit) {
  SLUICE_RETURN_IF_ERROR(dialer_->start(host, port, our_index, deadline, std::move(limit)));
  update_deadline();
  return absl::OkStatus();
}

bool Door::dialing() const { return dialer_->dialing(); }

absl::StatusOr<Door::Dialed> Door::take_dial_result() {
  absl::StatusOr<Dialed> r = dialer_->take_result();
  if (r.ok() && r->link == door::Link::kUcx) {  // the connection stays open as our index's link
    add_link(dialer_->our_index(), r->fd);
    r->fd = -1;
  }
  return r;
}

}  // namespace sluice::detail
