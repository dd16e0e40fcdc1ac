// The front door's connections in handshake: reading and writing their frames (conn.h), for
// the server side (serve.cpp) and the client's dial (dial.cpp) alike.
#include "door/conn.h"

#include <sys/epoll.h>

#include <cerrno>
#include <cstring>

#include <absl/strings/str_format.h>

namespace sluice::detail {

void watch(int epoll_fd, int fd, std::uint64_t tag, std::uint32_t events, bool add) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = tag;
  ::epoll_ctl(epoll_fd, add ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev);
}

// Reads what is missing of the current frame, never beyond it: the header, then exactly the
// body length the header allows. Bytes past a frame stay in the socket for the next step.
FrameRead read_frame(DoorConn& c, std::string* why) {
  while (true) {
    std::size_t want = c.have_header ? door::kFrameHeaderSize + c.header.body_len : door::kFrameHeaderSize;
    std::size_t have = c.in.size();
    if (have == want) {
      if (c.have_header) return FrameRead::kFrame;
      door::Parse p = door::decode_header(c.in, &c.header);
      if (p != door::Parse::kOk) {
        *why = absl::StrFormat("frame header: %s", door::to_string(p));
        return FrameRead::kBad;
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
      return FrameRead::kClosed;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return FrameRead::kMore;
    *why = std::strerror(errno);
    return FrameRead::kClosed;
  }
}

bool flush(DoorConn& c, int epoll_fd) {
  while (c.out_off < c.out.size()) {
    ssize_t n = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out_off += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!c.want_out) {
        c.want_out = true;
        watch(epoll_fd, c.fd, kConnTag | c.id, EPOLLIN | EPOLLOUT, false);
      }
      return true;
    }
    return false;  // the other side is gone
  }
  c.out.clear();
  c.out_off = 0;
  if (c.want_out) {
    c.want_out = false;
    watch(epoll_fd, c.fd, kConnTag | c.id, EPOLLIN, false);
  }
  return true;
}

}  // namespace sluice::detail
