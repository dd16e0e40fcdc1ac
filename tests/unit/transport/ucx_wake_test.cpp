// A worker's shared-memory wake-up sockets (Worker::drain_wakeups, lib/transport/ucx_wake.cpp)
// against real UCX: their send buffers, raised with CAP_NET_ADMIN and without it.
#include <linux/capability.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "transport/transport.h"
#include "transport/ucx.h"
#include "transport/ucx_fifo.h"

namespace sluice::detail {
namespace {

using Clock = std::chrono::steady_clock;

struct Counted : TransportOp {
  int calls = 0;
};

void count(TransportOp* op, absl::StatusCode, std::size_t, Tag) { ++static_cast<Counted*>(op)->calls; }

// The process's Unix datagram sockets (UCX's shared-memory wake-up sockets among them).
std::vector<int> unix_datagram_sockets() {
  std::vector<int> out;
  for (int fd = 0; fd < 4096; ++fd)
    if (unix_datagram(fd)) out.push_back(fd);
  return out;
}

int send_buffer(int fd) {
  int bytes = 0;
  socklen_t len = sizeof bytes;
  EXPECT_EQ(::getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, &len), 0);
  return bytes;
}

// Whether this thread's effective capabilities hold CAP_NET_ADMIN (capabilities are per
// thread); set_net_admin turns it on (where permitted) or off.
bool net_admin() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  return ::syscall(SYS_capget, &header, data) == 0 && (data[0].effective & (1u << CAP_NET_ADMIN)) != 0;
}

void set_net_admin(bool on) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  ASSERT_EQ(::syscall(SYS_capget, &header, data), 0);
  if (on) data[0].effective |= data[0].permitted & (1u << CAP_NET_ADMIN);
  else data[0].effective &= ~(1u << CAP_NET_ADMIN);
  ASSERT_EQ(::syscall(SYS_capset, &header, data), 0);
}

// A new worker's wake-up sockets, once it has drained them: their send buffers (what the
// kernel reports, twice what was set).
std::vector<int> drained_wake_buffers(TransportContext& ctx, std::unique_ptr<Worker>* keep) {
  std::vector<int> before = unix_datagram_sockets();
  auto w = Worker::create(ctx);
  EXPECT_TRUE(w.ok()) << w.status();
  if (!w.ok()) return {};
  *keep = std::move(*w);
  Worker& worker = **keep;
  // A message through its own shared memory: UCX adds a transport's socket to the worker's
  // event set once an endpoint has used it.
  auto ep = worker.connect(
      worker.address(), [](void*, int) {}, nullptr);
  EXPECT_TRUE(ep.ok()) << ep.status();
  if (!ep.ok() || !through_shared_fifo(ep->transports())) return {};
  std::uint64_t v = 1, got = 0;
  Counted s, d;
  s.on_complete = d.on_complete = count;
  PostResult r = worker.post_recv(*ep, &d, &got, sizeof got, 7, kFullMask, nullptr);
  PostResult sent = ep->post_send(&s, &v, sizeof v, 7, nullptr);
  auto until = Clock::now() + std::chrono::seconds(5);
  while (((r.kind == Post::kPending && d.calls == 0) || (sent.kind == Post::kPending && s.calls == 0)) &&
         Clock::now() < until)
    worker.progress();
  while (!worker.arm() && Clock::now() < until) worker.progress();
  worker.drain_wakeups();
  (void)worker.wait_request(ep->start_close(true), Clock::now() + std::chrono::seconds(2));
  std::vector<int> sizes;
  for (int fd : unix_datagram_sockets())
    if (std::find(before.begin(), before.end(), fd) == before.end()) sizes.push_back(send_buffer(fd));
  return sizes;
}

long wmem_max() {
  long v = 212992;
  if (FILE* f = std::fopen("/proc/sys/net/core/wmem_max", "r")) {
    if (std::fscanf(f, "%ld", &v) != 1) v = 212992;
    std::fclose(f);
  }
  return v;
}

// A worker raises its wake-up sockets' send buffers to 8 MiB (the kernel reports 16): past
// net.core.wmem_max where the thread may (CAP_NET_ADMIN), else up to it.
TEST(WakeUpSockets, AWorkerRaisesItsWakeUpSocketsSendBuffers) {
  auto ctx = TransportContext::create(Config());
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  constexpr long kAsked = 8L << 20;
  std::unique_ptr<Worker> first, second;
  bool had = net_admin();
  set_net_admin(true);
  bool may = net_admin();  // root's, or a process given the capability
  std::vector<int> with = drained_wake_buffers(**ctx, &first);
  set_net_admin(false);
  std::vector<int> without = drained_wake_buffers(**ctx, &second);
  set_net_admin(had);
  if (with.empty() && without.empty()) GTEST_SKIP() << "no shared-memory wake-up socket here";
  ASSERT_FALSE(with.empty());
  ASSERT_FALSE(without.empty());
  long capped = 2 * std::min(kAsked, wmem_max());
  for (int bytes : without) EXPECT_EQ(bytes, capped) << "without CAP_NET_ADMIN, up to net.core.wmem_max";
  for (int bytes : with) EXPECT_EQ(bytes, may ? 2 * kAsked : capped) << (may ? "with CAP_NET_ADMIN" : "without it");
}

}  // namespace
}  // namespace sluice::detail
