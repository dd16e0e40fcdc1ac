// The stream transport's hub: one per worker, the epoll set of its connections, progress,
// the unexpected messages of all of them. (stream_endpoint.cpp: the Endpoint and Worker calls.)
#include "transport/stream.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <absl/strings/str_format.h>

#include "core/log.h"

namespace sluice::detail {

StreamHub::StreamHub() { epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC); }

StreamHub::~StreamHub() {
  for (StreamConn* c : conns_) delete c;
  for (StreamConn* c : closed_) delete c;
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

StreamConn* StreamHub::open(StreamOptions options, Endpoint::ErrorCallback on_error, void* arg) {
  auto* c = new StreamConn(this, std::move(options), on_error, arg);
  conns_.push_back(c);
  return c;
}

void StreamHub::close(StreamConn* c) {
  c->close();
  auto it = std::find(conns_.begin(), conns_.end(), c);
  if (it != conns_.end()) {
    *it = conns_.back();
    conns_.pop_back();
  }
  closed_.push_back(c);
}

void StreamHub::watch(StreamConn* c, std::uint32_t events, bool add) {
  if (c->fd() < 0) return;
  if (events == 0) {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd(), nullptr);
    return;
  }
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = c;
  ::epoll_ctl(epoll_fd_, add ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c->fd(), &ev);
}

bool StreamHub::progress() {
  if (!closed_.empty()) {  // closed in an earlier call: nothing refers to them any more
    for (StreamConn* c : closed_) delete c;
    closed_.clear();
  }
  if (conns_.empty()) return false;
  if (skipped_ < skip_) {
    ++skipped_;
    return false;
  }
  skipped_ = 0;
  epoll_event evs[64];
  int n = ::epoll_wait(epoll_fd_, evs, 64, 0);
  if (n > 0) {
    skip_ = 0;
    empty_looks_ = 0;
  } else if (++empty_looks_ >= kQuietLooks) {
    empty_looks_ = kQuietLooks;
    skip_ = std::min(2 * skip_ + 1, kMaxSkip);
  }
  for (int i = 0; i < n; ++i) {
    auto* c = static_cast<StreamConn*>(evs[i].data.ptr);
    // A connection closed by a callback earlier in this batch is in closed_, still allocated.
    if (evs[i].events & EPOLLOUT) c->on_writable();
    if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) c->on_readable();
  }
  return n > 0;
}

void StreamHub::release() {
  holding_ = false;
  for (StreamConn* c : dirty_) c->flush();  // a closed one (still allocated) writes nothing
  dirty_.clear();
}

StreamMsg* StreamHub::take_unexpected(Tag tag, Tag mask) {
  for (StreamConn* c : conns_)
    if (StreamMsg* m = c->take_unexpected(tag, mask)) return m;
  return nullptr;
}

bool StreamHub::has_unexpected(Tag tag, Tag mask) const {
  return std::any_of(conns_.begin(), conns_.end(), [&](const StreamConn* c) { return c->has_unexpected(tag, mask); });
}

}  // namespace sluice::detail
