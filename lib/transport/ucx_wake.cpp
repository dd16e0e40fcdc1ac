// The wake-up datagrams of a UCX worker's shared-memory transports (Worker::drain_wakeups).
//
// A sender into a sleeping worker's shared-memory FIFO wakes it with a one-byte datagram on the
// worker's Unix socket (UCX 1.13's mm transport). UCX reads those only when the worker arms
// again; until then each one stays charged to the sending process's socket send buffer (about
// 768 bytes of the 212,992 of net.core.wmem_default). A server whose clients sleep once (in
// their connect) and then only poll, or stop progressing, is left with a full send buffer after
// about 277 of them, and UCX drops every later wake-up it sends (EAGAIN is ignored): clients
// that sleep then sleep until their timers. Reading the datagrams where the worker wakes, and
// now and then while it runs, returns that memory to the senders.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "transport/transport.h"
#include "transport/ucx.h"

namespace sluice::detail {
namespace {

// A wake-up send buffer for about 20,000 unread wake-ups (the kernel doubles it).
constexpr int kWakeSendBuffer = 8 << 20;

}  // namespace

// The mm transport's wake-up socket is one (the worker's event set holds the other transports'
// event fds too, which are not ours to read).
bool unix_datagram(int fd) {
  int domain = 0, type = 0;
  socklen_t len = sizeof domain;
  if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_UNIX) return false;
  len = sizeof type;
  return ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_DGRAM;
}

void Worker::find_wake_sockets() {
  // The epoll set's members, as /proc/self/fdinfo lists them ("tfd: <fd> events: ...").
  wake_sockets_.clear();
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fdinfo/%d", efd_);
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return;
  char line[256];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    int fd = -1;
    if (std::sscanf(line, "tfd: %d", &fd) != 1 || fd < 0 || !unix_datagram(fd)) continue;
    wake_sockets_.push_back(fd);
    // Room for the wake-ups this worker sends to peers that have not read them yet (one per
    // peer that stopped sleeping while its FIFO was armed): past the kernel's default, where the
    // process may (CAP_NET_ADMIN); else as much as net.core.wmem_max allows.
    int bytes = kWakeSendBuffer;
    if (::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof bytes) != 0)
      (void)::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  }
  std::fclose(f);
}

void Worker::drain_wakeups() {
  armed_ = false;
  // UCX adds a transport's socket to the set when an endpoint first uses it, where adaptive
  // progress is on: the set is read again every few seconds.
  auto now = std::chrono::steady_clock::now();
  if (now >= next_wake_scan_) {
    find_wake_sockets();
    next_wake_scan_ = now + std::chrono::seconds(5);
  }
  char buf[64];
  for (int fd : wake_sockets_)
    while (::recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {}
}

}  // namespace sluice::detail
