// TCP I/O engine choices for the stream transport, measured: epoll vs io_uring, batched vs
// per-message replies, copying sends vs MSG_ZEROCOPY / IORING_OP_SEND_ZC. Standalone (C++20,
// liburing, POSIX; no Sluice code). Two processes (fork) over TCP loopback with TCP_NODELAY,
// pinned to CPU 0 (client) and CPU 1 (server), a fresh connection per run, Sluice-shaped frames
// (24-byte header + payload). All loops busy-poll, as an engine's progress loop does.
//   lat   ping-pong of 8-byte messages, median round trip of the run in us: epoll_wait(0) +
//         recv/send; io_uring, a RECV kept posted + SEND, CQ polled by io_uring_peek_cqe (default
//         setup, and DEFER_TASKRUN); SQPOLL (its thread on the process's CPU, which sleeps in
//         io_uring_wait_cqe: 2 cores leave no spare core to poll on).
//   rate  8-byte calls, 32 outstanding, each answered: calls/s. Receives fill a 64 KiB buffer
//         and are parsed many frames at a time; replies go one send (one linked SEND SQE) each,
//         or one writev (one SENDMSG SQE) per receive batch.
//   bulk  1 MiB messages, window 8, acked by an epoll receiver that recvs straight into the
//         destination: sendmsg from the caller's buffer, MSG_ZEROCOPY (completions reaped from
//         the error queue), io_uring SEND, io_uring SEND_ZC (if the kernel has it): GB/s.
// Variants alternate in rounds (round 0: warm-up, not reported); each line gives the values per
// round, their median, and the median of the per-round ratios to the test's first (epoll) one.
// Built as build/perf/tcp-io-bench where liburing-dev is installed (scripts/setup installs it).
// Run:   build/perf/tcp-io-bench [rounds=7]      (on a quiet machine: every loop spins on its core)
#include <arpa/inet.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#ifndef IORING_SEND_ZC_REPORT_USAGE              // liburing 2.3 predates them (the kernel's names)
#define IORING_SEND_ZC_REPORT_USAGE (1U << 3)    // NOLINT(readability-identifier-naming)
#define IORING_NOTIF_USAGE_ZC_COPIED (1U << 31)  // NOLINT(readability-identifier-naming)
#endif

namespace {

struct Hdr {  // the stream transport's frame header: 24 bytes
  std::uint64_t tag = 0, length = 0;
  std::uint32_t kind = 0, seq = 0;
};
struct Frame {  // a small message: header + 8-byte payload
  Hdr h;
  char payload[8];
};
static_assert(sizeof(Hdr) == 24 && sizeof(Frame) == 32);

constexpr std::size_t kReadAhead = std::size_t{64} * 1024, kBulk = std::size_t{1} << 20,
                      kBulkFrame = sizeof(Hdr) + kBulk;
constexpr long kLatN = 20000, kRateN = 300000, kBulkN = 1024;
constexpr int kRateWindow = 32, kBulkWindow = 8;
constexpr std::uint64_t kRecvTag = 1ull << 62, kSendTag = 1ull << 61;
long g_zc_notes = 0, g_zc_copied = 0;  // zerocopy completions, and how many say "copied"

[[noreturn]] void die(const char* what, int err = errno) {
  std::fprintf(stderr, "tcp_io_bench: %s: %s\n", what, std::strerror(err));
  std::exit(1);
}
double now_ns() {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x.size() % 2 ? x[x.size() / 2] : (x[x.size() / 2 - 1] + x[x.size() / 2]) / 2;
}
int epoll_for(int fd, std::uint32_t events) {
  int ep = epoll_create1(0);
  epoll_event ev{events, {}};
  if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) die("epoll");
  return ep;
}

// Calls on_frame for each complete frame in buf[0, have), moves the partial tail to the front
// and returns its length.
template <class F>
std::size_t parse(char* buf, std::size_t have, F&& on_frame) {
  std::size_t at = 0;
  for (; have - at >= sizeof(Frame); at += sizeof(Frame)) {
    if (reinterpret_cast<const Hdr*>(buf + at)->length != 8) die("bad frame", EPROTO);
    on_frame(buf + at);
  }
  std::memmove(buf, buf + at, have - at);
  return have - at;
}

// ---- io_uring basics ---------------------------------------------------------------------------
// kUring: completions' task work runs in our own io_uring_enter (which io_uring_peek_cqe makes
// when IORING_SQ_TASKRUN is set), not by an IPI into the spinning thread as with the default
// setup. kSqpoll: the SQ thread shares the process's CPU, so the process sleeps for completions.
enum class Engine { kEpoll, kUringDefault, kUring, kSqpoll };
void setup_ring(io_uring* ring, int fd, Engine engine) {
  io_uring_params p{};
  if (engine == Engine::kUring)
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
  if (engine == Engine::kSqpoll)
    p.flags = IORING_SETUP_SQPOLL | IORING_SETUP_SQ_AFF, p.sq_thread_cpu = sched_getcpu(), p.sq_thread_idle = 2000;
  if (int e = io_uring_queue_init_params(256, ring, &p); e < 0) die("io_uring_queue_init", -e);
  if (int e = io_uring_register_files(ring, &fd, 1); e < 0) die("io_uring_register_files", -e);
}
// 256 SQEs: no submit here holds more than a window + 1, so io_uring_get_sqe never fails.
void fixed(io_uring_sqe* sqe, std::uint64_t user_data) {  // after the prep call: on registered file 0
  sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data64(sqe, user_data);
}
void post_recv(io_uring* ring, char* buf, std::size_t len) {
  io_uring_sqe* sqe = io_uring_get_sqe(ring);
  io_uring_prep_recv(sqe, 0, buf, len, 0);
  sqe->ioprio |= IORING_RECVSEND_POLL_FIRST;  // the answer is rarely there yet: arm the poll at once
  fixed(sqe, kRecvTag);
}
io_uring_cqe next_cqe(io_uring* ring, bool sleep) {  // busy-polls the CQ unless sleep
  io_uring_cqe* cqe = nullptr;
  while ((sleep ? io_uring_wait_cqe(ring, &cqe) : io_uring_peek_cqe(ring, &cqe)) != 0) {}
  io_uring_cqe c = *cqe;
  io_uring_cqe_seen(ring, cqe);
  return c;
}

// ---- lat and rate ------------------------------------------------------------------------------
struct EchoCfg {
  bool client, batch;
  long window, n;
  std::vector<double>* stamps;  // client, lat: a time stamp per reply
};

// One side: the read-ahead buffer, and a ring of outgoing frames with their iovecs, so that a
// batch of consecutive slots is one iovec array (one writev, one SENDMSG SQE). Each side answers
// every frame it receives (the client with its next call); the client primes a window of calls.
struct Echo {
  static constexpr unsigned kN = 1024;
  EchoCfg c;
  std::vector<char> buf = std::vector<char>(kReadAhead);
  std::size_t have = 0;
  long received = 0, sent = 0;
  Frame frames[kN];
  iovec iov[kN];
  msghdr mh[kN];
  unsigned head = 0, first = 0, busy = 0;  // next free slot, first unsent, slots whose send is open

  explicit Echo(const EchoCfg& cfg) : c(cfg) {
    Frame call{{0, 8, 1, 0}, {}};
    for (; c.client && sent < c.window; ++sent) add(reinterpret_cast<const char*>(&call));
  }
  void add(const char* frame) {
    if (busy == kN) die("outbox overflow", ENOBUFS);
    std::memcpy(&frames[head % kN], frame, sizeof(Frame));  // an eager send copies 8 bytes
    iov[head % kN] = {&frames[head % kN], sizeof(Frame)};
    ++head, ++busy;
  }
  // Takes `bytes` more received bytes and answers each complete frame; flush() sends what is
  // queued: after each answer if flush_each, else when the ring wraps and at the end.
  template <class F>
  void consume(std::size_t bytes, bool flush_each, F&& flush) {
    have = parse(buf.data(), have + bytes, [&](const char* f) {
      if (++received, c.stamps) c.stamps->push_back(now_ns());
      if (sent == c.n) return;
      add(f), ++sent;
      if (flush_each || head % kN == 0) flush();
    });
    flush();
  }
};

void flush_sock(int fd, Echo& e) {
  unsigned k = e.head - e.first, at = e.first % Echo::kN;
  if (k == 0) return;
  ssize_t r = k == 1 ? send(fd, &e.frames[at], sizeof(Frame), 0) : writev(fd, &e.iov[at], int(k));
  if (r != ssize_t(k * sizeof(Frame))) die("short send of small frames");
  e.first += k, e.busy -= k;
}

// Queues the pending frames: one SENDMSG (batch) or a chain of linked SENDs, one per frame.
void flush_uring(io_uring* ring, Echo& e) {
  unsigned k = e.head - e.first, at = e.first % Echo::kN;
  if (k == 0) return;
  if (e.c.batch) {
    e.mh[at] = msghdr{};
    e.mh[at].msg_iov = &e.iov[at], e.mh[at].msg_iovlen = k;
    io_uring_sqe* sqe = io_uring_get_sqe(ring);
    io_uring_prep_sendmsg(sqe, 0, &e.mh[at], 0);
    fixed(sqe, kSendTag | k);
  }
  for (unsigned i = 0; !e.c.batch && i < k; ++i) {
    io_uring_sqe* sqe = io_uring_get_sqe(ring);
    io_uring_prep_send(sqe, 0, &e.frames[(at + i) % Echo::kN], sizeof(Frame), 0);
    fixed(sqe, kSendTag | 1);
    if (i + 1 < k) sqe->flags |= IOSQE_IO_LINK;
  }
  e.first += k;
}

// epoll_wait(0) in a loop; one recv per readiness into the read-ahead buffer.
double echo_epoll(int fd, const EchoCfg& c) {
  int ep = epoll_for(fd, EPOLLIN);
  epoll_event ev;
  auto e = std::make_unique<Echo>(c);
  double t0 = now_ns();
  for (flush_sock(fd, *e); e->received < c.n;) {
    if (epoll_wait(ep, &ev, 1, 0) <= 0) continue;
    ssize_t r = recv(fd, &e->buf[e->have], kReadAhead - e->have, 0);
    if (r < 0 && errno == EAGAIN) continue;
    if (r <= 0) die("recv");
    e->consume(r, !c.batch, [&] { flush_sock(fd, *e); });
  }
  close(ep);
  return now_ns() - t0;
}

// One RECV always posted into the read-ahead buffer; the answers (linked, so in order) and the
// re-armed RECV go in one io_uring_enter (in none while an SQPOLL thread is awake).
double echo_uring(int fd, const EchoCfg& c, Engine engine) {
  io_uring ring;
  setup_ring(&ring, fd, engine);
  auto e = std::make_unique<Echo>(c);
  double t0 = now_ns();
  flush_uring(&ring, *e);
  post_recv(&ring, e->buf.data(), kReadAhead);
  for (io_uring_submit(&ring); e->received < c.n || e->busy > 0;) {
    io_uring_cqe cqe = next_cqe(&ring, engine == Engine::kSqpoll);
    if (cqe.user_data & kSendTag) {
      unsigned k = cqe.user_data & 0xffff;
      if (cqe.res != int(k * sizeof(Frame))) die("io_uring send", cqe.res < 0 ? -cqe.res : EIO);
      e->busy -= k;
      continue;
    }
    if (cqe.res <= 0) die("io_uring recv", -cqe.res);
    e->consume(cqe.res, false, [&] { flush_uring(&ring, *e); });
    if (e->received < c.n) post_recv(&ring, &e->buf[e->have], kReadAhead - e->have);
    io_uring_submit(&ring);
  }
  double t = now_ns() - t0;
  io_uring_queue_exit(&ring);
  return t;
}

// ---- bulk --------------------------------------------------------------------------------------
// The receiver of every bulk variant: exact header reads, the payload straight into the
// destination, a 32-byte ack frame per message.
void bulk_receive(int fd, long n) {
  int ep = epoll_for(fd, EPOLLIN);
  epoll_event ev;
  std::vector<char> dst(kBulk);
  Hdr h;
  std::size_t got = 0;
  bool in_payload = false;
  Frame ack{{0, 8, 2, 0}, {}};
  for (long done = 0; done < n;) {
    if (epoll_wait(ep, &ev, 1, 0) <= 0) continue;
    while (done < n) {
      std::size_t want = in_payload ? h.length : sizeof h;
      char* at = in_payload ? dst.data() + got : reinterpret_cast<char*>(&h) + got;
      ssize_t r = recv(fd, at, want - got, 0);
      if (r < 0 && errno == EAGAIN) break;
      if (r <= 0) die("bulk recv");
      if ((got += r) < want) continue;
      got = 0, in_payload = !in_payload;
      if (in_payload && h.length != kBulk) die("bad bulk header", EPROTO);
      if (!in_payload && send(fd, &ack, sizeof ack, 0) != sizeof ack) die("ack send");
      if (!in_payload) ++done;
    }
  }
  close(ep);
}

// The caller's buffers: one [header | 1 MiB payload] slot per window place. Stamps message i's
// header into its slot and returns the slot.
char* slot(std::vector<char>& slots, long i) {
  Hdr h{0, kBulk, 3, std::uint32_t(i)};
  return static_cast<char*>(std::memcpy(&slots[(i % kBulkWindow) * kBulkFrame], &h, sizeof h));
}

// Drains MSG_ZEROCOPY completions from the error queue; returns how many sends completed.
std::uint32_t reap_zerocopy(int fd) {
  std::uint32_t done = 0;
  for (char control[128];;) {
    msghdr m{};
    m.msg_control = control, m.msg_controllen = sizeof control;
    ssize_t r = recvmsg(fd, &m, MSG_ERRQUEUE);
    if (r < 0 && errno != EAGAIN) die("recvmsg MSG_ERRQUEUE");
    if (r < 0) return done;
    for (cmsghdr* cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
      auto* e = reinterpret_cast<sock_extended_err*>(CMSG_DATA(cm));
      if (e->ee_origin != SO_EE_ORIGIN_ZEROCOPY) continue;
      done += e->ee_data - e->ee_info + 1, ++g_zc_notes;
      g_zc_copied += (e->ee_code & SO_EE_CODE_ZEROCOPY_COPIED) != 0;
    }
  }
}

// Sender on the socket: sendmsg (MSG_ZEROCOPY if zc) of [header, payload] from the slot, driven
// by an epoll_wait(0) loop. A zerocopy slot is reused once every send that read it completed
// (one TCP socket completes them in order, so a count suffices).
double bulk_send_sock(int fd, long n, bool zc) {
  int one = 1, ep = epoll_for(fd, EPOLLIN | EPOLLOUT);
  if (zc && setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one) != 0) die("SO_ZEROCOPY");
  epoll_event ev;
  std::vector<char> slots(kBulkWindow * kBulkFrame, 'x'), acks(kReadAhead);
  std::size_t have = 0, off = 0;
  std::uint32_t zc_issued = 0, zc_done = 0, zc_last[kBulkWindow] = {};
  bool blocked = false;
  long started = 0, acked = 0;
  char* s = nullptr;
  double t0 = now_ns();
  while (acked < n) {
    std::uint32_t e = epoll_wait(ep, &ev, 1, 0) > 0 ? ev.events : 0;
    for (ssize_t r; (e & EPOLLIN) && (r = recv(fd, &acks[have], kReadAhead - have, MSG_DONTWAIT)) > 0;)
      have = parse(acks.data(), have + r, [&](const char*) { ++acked; });
    if (zc && (e & EPOLLERR)) zc_done += reap_zerocopy(fd);
    blocked = blocked && !(e & EPOLLOUT);
    while (!blocked && started < n && started - acked < kBulkWindow) {
      if (off == 0 && zc && started >= kBulkWindow && zc_done <= zc_last[started % kBulkWindow]) break;
      if (off == 0) s = slot(slots, started);
      std::size_t body = std::max(off, sizeof(Hdr));
      iovec iov[2] = {{s + off, body - off}, {s + body, kBulkFrame - body}};
      msghdr m{};
      m.msg_iov = iov, m.msg_iovlen = 2;
      ssize_t r = sendmsg(fd, &m, MSG_DONTWAIT | (zc ? MSG_ZEROCOPY : 0));
      if (r < 0 && errno != EAGAIN && errno != ENOBUFS) die("sendmsg");
      if (r < 0) {
        blocked = errno == EAGAIN;  // ENOBUFS: zerocopy out of option memory, reap and retry
        break;
      }
      if (zc) zc_last[started % kBulkWindow] = zc_issued++;
      if ((off += r) == kBulkFrame) off = 0, ++started;
    }
  }
  double t = now_ns() - t0;
  while (zc && zc_done < zc_issued) zc_done += reap_zerocopy(fd);
  close(ep);
  return t;
}

// Sender on io_uring: one SEND (SEND_ZC) of the whole slot in flight at a time, which keeps one
// stream in order; MSG_WAITALL makes the kernel finish short sends. Acks come through a RECV.
double bulk_send_uring(int fd, long n, bool zc) {
  io_uring ring;
  setup_ring(&ring, fd, Engine::kUring);
  std::vector<char> slots(kBulkWindow * kBulkFrame, 'x'), acks(kReadAhead);
  std::size_t have = 0;
  bool sending = false, held[kBulkWindow] = {};  // held: SEND_ZC buffer not released yet
  long started = 0, acked = 0, notifs = 0;
  double t0 = now_ns();
  post_recv(&ring, acks.data(), acks.size());
  while (acked < n || (zc && notifs < n)) {
    if (!sending && started < n && started - acked < kBulkWindow && !held[started % kBulkWindow]) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (zc) io_uring_prep_send_zc(sqe, 0, slot(slots, started), kBulkFrame, MSG_WAITALL, IORING_SEND_ZC_REPORT_USAGE);
      else io_uring_prep_send(sqe, 0, slot(slots, started), kBulkFrame, MSG_WAITALL);
      fixed(sqe, kSendTag | (started % kBulkWindow));
      io_uring_submit(&ring);
      held[started % kBulkWindow] = zc, sending = true;
    }
    io_uring_cqe cqe = next_cqe(&ring, false);
    if (cqe.user_data & kRecvTag) {
      if (cqe.res <= 0) die("io_uring ack recv", -cqe.res);
      have = parse(acks.data(), have + cqe.res, [&](const char*) { ++acked; });
      if (acked < n) post_recv(&ring, &acks[have], acks.size() - have), io_uring_submit(&ring);
    } else if (cqe.flags & IORING_CQE_F_NOTIF) {
      held[cqe.user_data & 0xff] = false, ++notifs, ++g_zc_notes;
      g_zc_copied += (unsigned(cqe.res) & IORING_NOTIF_USAGE_ZC_COPIED) != 0;
    } else {
      if (cqe.res != int(kBulkFrame)) die("io_uring bulk send", cqe.res < 0 ? -cqe.res : EIO);
      sending = false, ++started;
    }
  }
  double t = now_ns() - t0;
  io_uring_queue_exit(&ring);
  return t;
}

// ---- harness -----------------------------------------------------------------------------------
enum class Test { kLat, kRate, kBulk };
struct Variant {
  Test test;
  Engine engine;
  const char* name;
  bool batch = false, zc = false;
  std::vector<double> values = {};  // one per reported round
};

// Runs one side of a variant; the client returns its measure: us, calls/s or GB/s.
double run_variant(int fd, bool client, const Variant& v) {
  bool uring = v.engine != Engine::kEpoll, lat = v.test == Test::kLat;
  if (v.test == Test::kBulk && !client) return bulk_receive(fd, kBulkN), 0;
  if (v.test == Test::kBulk)
    return kBulkN * double(kBulk) / (uring ? bulk_send_uring(fd, kBulkN, v.zc) : bulk_send_sock(fd, kBulkN, v.zc));
  std::vector<double> stamps;
  EchoCfg c{client, v.batch, lat ? 1 : kRateWindow, lat ? kLatN : kRateN, client && lat ? &stamps : nullptr};
  stamps.push_back(now_ns());
  double ns = uring ? echo_uring(fd, c, v.engine) : echo_epoll(fd, c);
  if (!lat || !client) return static_cast<double>(c.n) / (ns / 1e9);
  std::adjacent_difference(stamps.begin(), stamps.end(), stamps.begin());
  return median(std::vector<double>(stamps.begin() + 1, stamps.end())) / 1e3;
}

// A fresh connection per run; the server sends a byte once ready, so both start together.
int open_conn(int listener, std::uint16_t port, bool client) {
  int fd = client ? socket(AF_INET, SOCK_STREAM, 0) : accept(listener, nullptr, nullptr), one = 1;
  sockaddr_in a{AF_INET, htons(port), {htonl(INADDR_LOOPBACK)}, {}};
  if (fd < 0 || (client && connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)) die("connect/accept");
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) die("TCP_NODELAY");
  if ((client ? recv(fd, &one, 1, MSG_WAITALL) : send(fd, &one, 1, 0)) != 1) die("handshake");  // 1 byte
  if (fcntl(fd, F_SETFL, O_NONBLOCK) != 0) die("O_NONBLOCK");
  return fd;
}

void run_rounds(std::vector<Variant>& vs, int rounds, int listener, std::uint16_t port, bool client) {
  for (int r = 0; r <= rounds; ++r) {
    for (std::size_t i = 0; i < vs.size(); ++i) {
      Variant& v = vs[(i + r) % vs.size()];  // rotate the order: no variant always runs first
      int fd = open_conn(listener, port, client);
      double x = run_variant(fd, client, v);
      if (client && r > 0) v.values.push_back(x);
      close(fd);
    }
  }
}

void report(const std::vector<Variant>& vs) {
  const char* unit[] = {"ping-pong, median round trip in us (lower is better)", "calls/s", "GB/s"};
  for (std::size_t i = 0, first = 0; i < vs.size(); ++i) {
    if (vs[i].test != vs[first].test || i == 0) first = i, std::printf("\n%s\n", unit[int(vs[i].test)]);
    std::vector<double> ratio(vs[i].values.size());  // against the epoll run of the same round
    std::transform(vs[i].values.begin(), vs[i].values.end(), vs[first].values.begin(), ratio.begin(),
                   [](double x, double epoll) { return x / epoll; });
    std::printf("  %-33s median %11.3f  x%.3f vs epoll  rounds:", vs[i].name, median(vs[i].values), median(ratio));
    for (double x : vs[i].values) std::printf(" %.3f", x);
    std::printf("\n");
  }
  if (g_zc_notes) std::printf("\nzerocopy completions: %ld, %ld of them copied\n", g_zc_notes, g_zc_copied);
}

// Which variants this kernel can run: SQPOLL and IORING_OP_SEND_ZC are probed before the fork.
std::vector<Variant> variants() {
  using enum Test;
  using enum Engine;
  std::vector<Variant> vs = {
      {kLat, kEpoll, "lat   epoll"},
      {kLat, kUringDefault, "lat   io_uring, default setup"},
      {kLat, kUring, "lat   io_uring"},
      {kRate, kEpoll, "rate  epoll, send per reply"},
      {kRate, kEpoll, "rate  epoll, writev per batch", true},
      {kRate, kUring, "rate  io_uring, SEND per reply"},
      {kRate, kUring, "rate  io_uring, SENDMSG per batch", true},
      {kBulk, kEpoll, "bulk  sendmsg"},
      {kBulk, kEpoll, "bulk  sendmsg MSG_ZEROCOPY", false, true},
      {kBulk, kUring, "bulk  io_uring SEND"},
  };
  io_uring ring;
  if (int e = io_uring_queue_init(8, &ring, IORING_SETUP_SQPOLL); e < 0)
    std::printf("SQPOLL refused: %s\n", std::strerror(-e));
  else io_uring_queue_exit(&ring), vs.insert(vs.begin() + 3, Variant{kLat, kSqpoll, "lat   io_uring SQPOLL"});
  io_uring_probe* probe = io_uring_get_probe();
  if (probe && io_uring_opcode_supported(probe, IORING_OP_SEND_ZC))
    vs.push_back({kBulk, kUring, "bulk  io_uring SEND_ZC", false, true});
  else std::printf("IORING_OP_SEND_ZC: not supported by this kernel\n");
  if (probe) io_uring_free_probe(probe);
  return vs;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 7, listener = socket(AF_INET, SOCK_STREAM, 0), status = 0;
  utsname u;
  uname(&u);
  std::printf("kernel %s, %d rounds + 1 warm-up, client on CPU 0, server on CPU 1\n", u.release, rounds);
  std::vector<Variant> vs = variants();
  sockaddr_in a{AF_INET, 0, {htonl(INADDR_LOOPBACK)}, {}};
  socklen_t len = sizeof a;
  if (bind(listener, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(listener, 16) != 0) die("listen");
  getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
  std::fflush(stdout);
  pid_t pid = fork();
  cpu_set_t cpu;
  CPU_ZERO(&cpu);
  CPU_SET(pid == 0 ? 1 : 0, &cpu);
  if (pid < 0 || sched_setaffinity(0, sizeof cpu, &cpu) != 0) die("fork/sched_setaffinity");
  if (pid != 0) close(listener);  // a dead server then refuses the next connection
  run_rounds(vs, rounds, listener, ntohs(a.sin_port), pid != 0);
  if (pid == 0) return 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) die("server", ECHILD);
  report(vs);
  double load[3];
  if (getloadavg(load, 3) == 3) std::printf("load average at the end: %.2f %.2f %.2f\n", load[0], load[1], load[2]);
}
