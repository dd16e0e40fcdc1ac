// sluice-perf-mpi: the Open MPI baseline of sluice-perf (--baseline mpi), one pattern of its
// tests between two MPI ranks, doing what raw UCX's loop does (raw_ucx.cpp) through MPI's
// point-to-point calls. sluice-perf's rank 0 starts it under mpirun once per repetition and
// parses the one line rank 0 prints:
//
//   mpirun -n 2 --bind-to core --mca pml ob1 sluice-perf-mpi echo 8 8 20000 2000 1 0
//   sluice-perf-mpi rtt_p50_us 0.301 rtt_p99_us 0.420 rtt_avg_us 0.310 seconds 0.00621
//
// Patterns: echo (rank 1 sends back the bytes that just arrived), serve (from a buffer of its
// own, as a storage server does), stream (rank 0 sends, WINDOW in flight; rank 1 acknowledges
// the last) and window (WINDOW echoes in flight). Exit status 2 on bad arguments.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "buffer.h"

namespace {

using sluice::perf::PageBuffer;
using Clock = std::chrono::steady_clock;
constexpr int kData = 0xd0, kReply = 0xd1, kAck = 0xac;

struct Args {
  std::string pattern;
  std::size_t there = 0, back = 0;
  int iters = 0, warmup = 0, window = 1;
  std::size_t offset = 0;  // where the send buffers start in their page (--offset), as the raw loop's
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The p-th fraction of `v`, as sluice-perf's percentile() picks it.
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  auto i = std::min(v.size() - 1, static_cast<std::size_t>(std::floor(p * static_cast<double>(v.size()))));
  return v[i];
}

// Each round trip in seconds (rank 0): rank 0 posts the receive of `back` bytes, sends `there`
// and waits; rank 1 receives and answers, from what arrived (`echo`) or from its own buffer.
std::vector<double> round_trips(const Args& a, int iters, int me, bool echo, PageBuffer& s, PageBuffer& r) {
  std::vector<double> rtts;
  rtts.reserve(static_cast<std::size_t>(iters));
  auto there = static_cast<int>(a.there), back = static_cast<int>(a.back);
  for (int i = 0; i < iters; ++i) {
    if (me == 0) {
      auto t0 = Clock::now();
      MPI_Request q;
      MPI_Irecv(r.data(), back, MPI_BYTE, 1, kData, MPI_COMM_WORLD, &q);
      MPI_Send(s.data(), there, MPI_BYTE, 1, kData, MPI_COMM_WORLD);
      MPI_Wait(&q, MPI_STATUS_IGNORE);
      rtts.push_back(seconds_since(t0));
    } else {
      MPI_Recv(r.data(), there, MPI_BYTE, 0, kData, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(echo ? r.data() : s.data(), back, MPI_BYTE, 0, kData, MPI_COMM_WORLD);
    }
  }
  return rtts;
}

// `iters` messages from rank 0 to rank 1, at most `window` in flight (rank 1 keeps `window`
// receives posted, all into one buffer), then rank 1's acknowledgement. Seconds it took.
// Messages of one tag match in order, so the oldest request is always the next to finish.
double stream(const Args& a, int iters, int me, PageBuffer& s, PageBuffer& r) {
  auto w = static_cast<std::size_t>(std::max(1, std::min(a.window, iters)));
  std::vector<MPI_Request> q(w, MPI_REQUEST_NULL);
  auto n = static_cast<int>(a.there);
  char ack[8] = {};
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    MPI_Request& slot = q[static_cast<std::size_t>(i) % w];
    MPI_Wait(&slot, MPI_STATUS_IGNORE);
    if (me == 0) MPI_Isend(s.data(), n, MPI_BYTE, 1, kData, MPI_COMM_WORLD, &slot);
    else MPI_Irecv(r.data(), n, MPI_BYTE, 0, kData, MPI_COMM_WORLD, &slot);
  }
  MPI_Waitall(static_cast<int>(w), q.data(), MPI_STATUSES_IGNORE);
  if (me == 0) MPI_Recv(ack, sizeof(ack), MPI_BYTE, 1, kAck, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  else MPI_Send(ack, sizeof(ack), MPI_BYTE, 0, kAck, MPI_COMM_WORLD);
  return seconds_since(t0);
}

// `window` echoes in flight: rank 0 sends requests (kData) and takes replies (kReply), a new
// request as each reply arrives; rank 1 answers each request from the buffer it filled while
// the slot's next request lands in the slot's other buffer. Seconds for `iters` round trips.
double echo_window(const Args& a, int iters, int me, PageBuffer& s) {
  auto w = static_cast<std::size_t>(std::max(1, std::min(a.window, iters)));
  auto n = static_cast<int>(a.there);
  std::vector<PageBuffer> bufs;
  for (std::size_t i = 0; i < 2 * w; ++i) bufs.emplace_back(std::max<std::size_t>(a.there, 1));
  std::vector<MPI_Request> rr(w, MPI_REQUEST_NULL), ss(w, MPI_REQUEST_NULL);
  std::vector<std::size_t> cur(w);
  int in_tag = me == 0 ? kReply : kData, out_tag = me == 0 ? kData : kReply, peer = 1 - me;
  auto t0 = Clock::now();
  int posted = 0, sent = 0;
  for (std::size_t i = 0; i < w; ++i, ++posted) {
    cur[i] = i;
    MPI_Irecv(bufs[i].data(), n, MPI_BYTE, peer, in_tag, MPI_COMM_WORLD, &rr[i]);
    if (me == 0) {
      MPI_Isend(s.data(), n, MPI_BYTE, peer, out_tag, MPI_COMM_WORLD, &ss[i]);
      ++sent;
    }
  }
  for (int done = 0; done < iters; ++done) {
    std::size_t i = static_cast<std::size_t>(done) % w;
    MPI_Wait(&rr[i], MPI_STATUS_IGNORE);
    MPI_Wait(&ss[i], MPI_STATUS_IGNORE);
    if (me != 0) {
      MPI_Isend(bufs[cur[i]].data(), n, MPI_BYTE, peer, out_tag, MPI_COMM_WORLD, &ss[i]);
      cur[i] = cur[i] < w ? cur[i] + w : cur[i] - w;
    } else if (sent < iters) {
      MPI_Isend(s.data(), n, MPI_BYTE, peer, out_tag, MPI_COMM_WORLD, &ss[i]);
      ++sent;
    }
    if (posted < iters) {
      MPI_Irecv(bufs[cur[i]].data(), n, MPI_BYTE, peer, in_tag, MPI_COMM_WORLD, &rr[i]);
      ++posted;
    }
  }
  MPI_Waitall(static_cast<int>(w), ss.data(), MPI_STATUSES_IGNORE);
  return seconds_since(t0);
}

// The pattern, warmup first (untimed: each repetition is a fresh job, whose first messages
// also set up its connections), then timed; rank 0 prints the line.
void run(const Args& a, int me) {
  PageBuffer s(std::max<std::size_t>({a.there, a.back, 1}), a.offset);
  PageBuffer r(std::max<std::size_t>({a.there, a.back, 1}));
  std::vector<double> rtts;
  double secs = NAN;
  for (int timed = 0; timed < 2; ++timed) {
    int iters = timed != 0 ? a.iters : a.warmup;
    MPI_Barrier(MPI_COMM_WORLD);
    if (a.pattern == "echo" || a.pattern == "serve") rtts = round_trips(a, iters, me, a.pattern == "echo", s, r);
    else if (a.pattern == "stream") secs = stream(a, iters, me, s, r);
    else secs = echo_window(a, iters, me, s);
  }
  if (me != 0) return;
  double sum = 0;
  for (double x : rtts) sum += x;
  if (!rtts.empty()) secs = sum;
  double avg = rtts.empty() ? NAN : sum / static_cast<double>(rtts.size());
  std::printf("sluice-perf-mpi rtt_p50_us %.6g rtt_p99_us %.6g rtt_avg_us %.6g seconds %.9g\n",
              percentile(rtts, 0.5) * 1e6, percentile(rtts, 0.99) * 1e6, avg * 1e6, secs);
  std::fflush(stdout);
}

bool parse(int argc, char** argv, Args* a) {
  if (argc != 8) return false;
  a->pattern = argv[1];
  char* end = nullptr;
  long v[6];
  for (int i = 0; i < 6; ++i) {
    v[i] = std::strtol(argv[i + 2], &end, 10);
    if (*end != '\0' || v[i] < 0 || v[i] > (1L << 30)) return false;
  }
  a->there = static_cast<std::size_t>(v[0]), a->back = static_cast<std::size_t>(v[1]);
  a->iters = static_cast<int>(v[2]), a->warmup = static_cast<int>(v[3]), a->window = static_cast<int>(v[4]);
  a->offset = static_cast<std::size_t>(v[5]);
  bool known = a->pattern == "echo" || a->pattern == "serve" || a->pattern == "stream" || a->pattern == "window";
  return known && a->iters > 0 && a->window > 0 && a->offset < 4096;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, &a)) {
    std::fprintf(stderr,
                 "usage: mpirun -n 2 sluice-perf-mpi echo|serve|stream|window THERE BACK ITERS WARMUP WINDOW OFFSET\n"
                 "sluice-perf's Open MPI baseline (sluice-perf --baseline mpi starts it).\n");
    return 2;
  }
  MPI_Init(&argc, &argv);
  int me = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (me == 0) std::fprintf(stderr, "sluice-perf-mpi: needs 2 ranks (mpirun -n 2), got %d\n", size);
    MPI_Finalize();
    return 2;
  }
  run(a, me);
  MPI_Finalize();
  return 0;
}
