#include "raw_ucx.h"

#include "buffer.h"
#include "connect.h"
#include "report.h"
#include "rows.h"
#include "tests.h"

#include <ucp/api/ucp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include <absl/strings/str_format.h>

namespace sluice::perf {
namespace {

using Clock = std::chrono::steady_clock;
constexpr ucp_tag_t kData = 0xd0;
constexpr ucp_tag_t kAck = 0xac;
constexpr ucp_tag_t kSettle = 0x5e;

#ifndef SLUICE_PROBES
#define SLUICE_PROBES 0
#endif
// The raw loop's probe (meson -Dprobes=true, beside the library's, lib/core/probe.h): cycles
// from a receive callback to the next send, printed at exit.
struct RawProbe {
  std::uint64_t rx = 0, sum = 0, n = 0;
  void received() { rx = __builtin_ia32_rdtsc(); }
  void sending() {
    if (rx == 0) return;
    std::uint64_t d = __builtin_ia32_rdtsc() - rx;
    if (d < 20000) sum += d, ++n;
    rx = 0;
  }
  ~RawProbe() {
    if (n != 0)
      std::fprintf(stderr, "raw probes: callback->send %.1f cycles over %lu rounds\n", double(sum) / double(n),
                   (unsigned long)n);
  }
} raw_probe;
constexpr bool kRawProbes = SLUICE_PROBES != 0;

struct Req {
  bool done = true;  // nothing outstanding
  ucs_status_t status = UCS_OK;
};

void send_cb(void* request, ucs_status_t status, void* user) {
  auto* r = static_cast<Req*>(user);
  r->done = true;
  r->status = status;
  ucp_request_free(request);
}

void recv_cb(void* request, ucs_status_t status, const ucp_tag_recv_info_t*, void* user) {
  if constexpr (kRawProbes) raw_probe.received();
  auto* r = static_cast<Req*>(user);
  r->done = true;
  r->status = status;
  ucp_request_free(request);
}

}  // namespace

struct RawUcx::Impl {
  ucp_context_h ctx = nullptr;
  ucp_worker_h worker = nullptr;
  std::vector<ucp_ep_h> eps;
  PageBuffer sbuf, rbuf;
  std::size_t send_offset = 0;

  ~Impl() {
    for (ucp_ep_h ep : eps) {
      if (ep == nullptr) continue;
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
      void* r = ucp_ep_close_nbx(ep, &p);
      if (r != nullptr && !UCS_PTR_IS_ERR(r)) {
        while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(worker);
        ucp_request_free(r);
      }
    }
    if (worker) ucp_worker_destroy(worker);
    if (ctx) ucp_cleanup(ctx);
  }

  void reserve(std::size_t n) {
    n = std::max<std::size_t>(n, 1);
    if (sbuf.size() < n) sbuf = PageBuffer(n, send_offset);
    if (rbuf.size() < n) rbuf = PageBuffer(n);
  }

  // Posts a send/recv; `r` is marked done when it completes (immediately or later).
  void send(int peer, const void* buf, std::size_t n, ucp_tag_t tag, Req* r) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = send_cb;
    p.user_data = r;
    r->done = false;
    if constexpr (kRawProbes) raw_probe.sending();
    void* s = ucp_tag_send_nbx(eps[static_cast<std::size_t>(peer)], buf, n, tag, &p);
    if (s == nullptr) r->done = true;
    else if (UCS_PTR_IS_ERR(s)) r->done = true, r->status = UCS_PTR_STATUS(s);
  }
  void recv(void* buf, std::size_t n, ucp_tag_t tag, Req* r) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv = recv_cb;
    p.user_data = r;
    r->done = false;
    void* s = ucp_tag_recv_nbx(worker, buf, n, tag, ~ucp_tag_t{0}, &p);
    if (s == nullptr) r->done = true;
    else if (UCS_PTR_IS_ERR(s)) r->done = true, r->status = UCS_PTR_STATUS(s);
  }
  // Receives a message taken out of the unexpected queue by ucp_tag_probe_nb.
  void recv_probed(ucp_tag_message_h msg, std::size_t n, Req* r) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv = recv_cb;
    p.user_data = r;
    r->done = false;
    void* s = ucp_tag_msg_recv_nbx(worker, rbuf.data(), n, msg, &p);
    if (s == nullptr) r->done = true;
    else if (UCS_PTR_IS_ERR(s)) r->done = true, r->status = UCS_PTR_STATUS(s);
  }
  void wait(Req& r) {
    while (!r.done) ucp_worker_progress(worker);
  }

  // Sends `iters` messages of `size` to `peer` with at most `window` in flight.
  void send_all(int peer, std::size_t size, int iters, int window) {
    std::vector<Req> reqs(static_cast<std::size_t>(window));
    for (int i = 0; i < iters; ++i) {
      Req& q = reqs[static_cast<std::size_t>(i % window)];
      if (i >= window) wait(q);
      send(peer, sbuf.data(), size, kData, &q);
    }
    for (auto& q : reqs) wait(q);
  }

  // Receives `total` messages of `size`, from anyone, keeping `window` receives posted. They
  // all go into one buffer (as ucx_perftest does): only the transfer is measured.
  void receive_all(std::size_t size, int total, int window) {
    std::vector<Req> reqs(static_cast<std::size_t>(window));
    int posted = 0, completed = 0;
    std::vector<bool> active(reqs.size(), false);
    for (std::size_t w = 0; w < reqs.size() && posted < total; ++w, ++posted) {
      recv(rbuf.data(), size, kData, &reqs[w]);
      active[w] = true;
    }
    while (completed < total) {
      ucp_worker_progress(worker);
      for (std::size_t w = 0; w < reqs.size(); ++w) {
        if (!active[w] || !reqs[w].done) continue;
        ++completed;
        active[w] = false;
        if (posted < total) {
          recv(rbuf.data(), size, kData, &reqs[w]);
          active[w] = true;
          ++posted;
        }
      }
    }
  }
};

absl::StatusOr<std::unique_ptr<RawUcx>> RawUcx::create(Bootstrap& boot, std::size_t send_offset) {
  std::unique_ptr<RawUcx> out(new RawUcx());
  out->impl_ = std::make_unique<Impl>();
  Impl& im = *out->impl_;
  im.send_offset = send_offset;
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  if (ucp_init(&params, nullptr, &im.ctx) != UCS_OK) return absl::UnavailableError("raw ucx: ucp_init failed");
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  if (ucp_worker_create(im.ctx, &wp, &im.worker) != UCS_OK)
    return absl::UnavailableError("raw ucx: ucp_worker_create failed");
  ucp_address_t* addr;
  std::size_t len;
  ucp_worker_get_address(im.worker, &addr, &len);
  std::string mine(reinterpret_cast<const char*>(addr), len);
  ucp_worker_release_address(im.worker, addr);
  SLUICE_RETURN_IF_ERROR(boot.put("perf.raw_ucx", mine));
  SLUICE_RETURN_IF_ERROR(boot.fence());
  im.eps.assign(static_cast<std::size_t>(boot.size()), nullptr);
  for (int r = 0; r < boot.size(); ++r) {
    SLUICE_ASSIGN_OR_RETURN(std::string a, boot.get(r, "perf.raw_ucx"));
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = reinterpret_cast<const ucp_address_t*>(a.data());
    if (ucp_ep_create(im.worker, &ep, &im.eps[static_cast<std::size_t>(r)]) != UCS_OK)
      return absl::UnavailableError(absl::StrFormat("raw ucx: cannot connect to rank %d", r));
  }
  return out;
}

RawUcx::~RawUcx() = default;

std::vector<double> RawUcx::exchange(int peer, std::size_t there, std::size_t back, int iters, bool initiator,
                                     bool echo) {
  Impl& im = *impl_;
  im.reserve(std::max(there, back));
  std::vector<double> rtts;
  rtts.reserve(static_cast<std::size_t>(iters));
  Req s, r;
  for (int i = 0; i < iters; ++i) {
    if (initiator) {
      auto t0 = Clock::now();
      im.recv(im.rbuf.data(), back, kData, &r);
      im.send(peer, im.sbuf.data(), there, kData, &s);
      im.wait(r);
      im.wait(s);
      rtts.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    } else {
      // An echo sends back the bytes that just arrived, as Sluice's echo handler does.
      im.recv(im.rbuf.data(), there, kData, &r);
      im.wait(r);
      im.send(peer, echo ? im.rbuf.data() : im.sbuf.data(), back, kData, &s);
      im.wait(s);
    }
  }
  return rtts;
}

double RawUcx::stream(int peer, std::size_t size, int iters, int window, bool sender) {
  Impl& im = *impl_;
  im.reserve(size);
  Req ack;
  char ackbuf[8] = {0};
  auto t0 = Clock::now();
  if (sender) {
    im.send_all(peer, size, iters, window);
    im.recv(ackbuf, sizeof(ackbuf), kAck, &ack);
    im.wait(ack);
  } else {
    im.receive_all(size, iters, window);
    im.send(peer, ackbuf, sizeof(ackbuf), kAck, &ack);
    im.wait(ack);
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

RawUcx::Held RawUcx::fanin(int ranks, std::size_t size, int iters, int window, std::chrono::milliseconds hold,
                           bool receiver) {
  Impl& im = *impl_;
  im.reserve(size);
  char ackbuf[8] = {0};
  Held held;
  if (!receiver) {
    Req ack;
    im.send_all(0, size, iters, window);
    im.recv(ackbuf, sizeof(ackbuf), kAck, &ack);
    im.wait(ack);
    return held;
  }
  // Busy for `hold`: the worker is progressed (what arrives is taken off the transport), but
  // no receive is posted, so every message waits in UCX's unexpected queue. Then they are
  // taken out of it one by one, counted, and the rest received as they come.
  for (auto until = Clock::now() + hold; Clock::now() < until;) ucp_worker_progress(im.worker);
  ucp_tag_recv_info_t info;
  while (ucp_tag_message_h msg = ucp_tag_probe_nb(im.worker, kData, ~ucp_tag_t{0}, 1, &info)) {
    ++held.messages;
    held.bytes += info.length;
    Req r;
    im.recv_probed(msg, info.length, &r);
    im.wait(r);
  }
  im.receive_all(size, iters * (ranks - 1) - held.messages, window);
  std::vector<Req> acks(static_cast<std::size_t>(ranks));
  for (int r = 1; r < ranks; ++r) im.send(r, ackbuf, sizeof(ackbuf), kAck, &acks[static_cast<std::size_t>(r)]);
  for (auto& a : acks) im.wait(a);
  return held;
}

double RawUcx::pingpong_window(int peer, std::size_t size, int iters, int window, bool initiator) {
  // Both sides keep `window` receives posted (requests on kData, replies on kData + 1) and
  // post exactly `iters` in all; each completion sends the next request or the reply.
  Impl& im = *impl_;
  im.reserve(size);
  auto w = static_cast<std::size_t>(std::min(window, iters));
  std::vector<Req> rr(w), ss(w);
  // Two buffers per slot: the responder replies from the one a request just filled while the
  // next request of that slot lands in the other (Sluice's replies, likewise, go out of the
  // request's own landing, and the next request lands elsewhere).
  std::vector<PageBuffer> bufs;
  for (std::size_t i = 0; i < 2 * w; ++i) bufs.emplace_back(std::max<std::size_t>(size, 1));
  std::vector<std::size_t> cur(w);
  for (std::size_t i = 0; i < w; ++i) cur[i] = i;
  auto other = [w](std::size_t b) { return b < w ? b + w : b - w; };
  ucp_tag_t in_tag = initiator ? kData + 1 : kData, out_tag = initiator ? kData : kData + 1;
  auto t0 = Clock::now();
  int posted = 0, completed = 0, sent = 0;
  std::vector<bool> active(w, false);
  for (std::size_t i = 0; i < w; ++i, ++posted) {
    im.recv(bufs[cur[i]].data(), size, in_tag, &rr[i]);
    active[i] = true;
    if (initiator) {
      im.send(peer, im.sbuf.data(), size, out_tag, &ss[i]);
      ++sent;
    }
  }
  while (completed < iters) {
    ucp_worker_progress(im.worker);
    for (std::size_t i = 0; i < w; ++i) {
      if (!active[i] || !rr[i].done) continue;
      ++completed;
      active[i] = false;
      im.wait(ss[i]);
      if (!initiator) {
        im.send(peer, bufs[cur[i]].data(), size, out_tag, &ss[i]);  // the request's own bytes back
        cur[i] = other(cur[i]);
      } else if (sent < iters) {
        im.send(peer, im.sbuf.data(), size, out_tag, &ss[i]);
        ++sent;
      }
      if (posted < iters) {
        im.recv(bufs[cur[i]].data(), size, in_tag, &rr[i]);
        active[i] = true;
        ++posted;
      }
    }
  }
  for (auto& q : ss) im.wait(q);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void RawUcx::settle(const Link& link) {
  if (link.role() > 1) return;
  Impl& im = *impl_;
  std::byte in{}, out{};
  Req r, s;
  im.recv(&in, 1, kSettle, &r);
  im.send(link.raw_peer(), &out, 1, kSettle, &s);
  im.wait(r);
  im.wait(s);
}

Figures RawUcx::round_trips(const Cmd& c, const Link& link, std::size_t there, std::size_t back, bool echo,
                            double scale) {
  if (link.role() > 1) return {};
  bool init = link.role() == 0;
  exchange(link.raw_peer(), there, back, c.warmup, init, echo);
  auto rtts = exchange(link.raw_peer(), there, back, c.iters, init, echo);
  return from_rtts(rtts, scale, c.size);
}

Figures RawUcx::run_am_lat(const Cmd& c, const Link& link) { return round_trips(c, link, c.size, c.size, true, 0.5); }
Figures RawUcx::run_rpc_lat(const Cmd& c, const Link& link) { return round_trips(c, link, c.size, c.size, true, 1.0); }
Figures RawUcx::run_read(const Cmd& c, const Link& link) { return round_trips(c, link, 8, c.size, false, 1.0); }
Figures RawUcx::run_write(const Cmd& c, const Link& link) { return round_trips(c, link, c.size, 8, false, 1.0); }

Figures RawUcx::run_rpc_rate(const Cmd& c, const Link& link) {
  Figures f;
  if (link.role() > 1) return f;
  double s = pingpong_window(link.raw_peer(), c.size, c.iters, c.window, link.role() == 0);
  f.rate = c.iters / s;
  return f;
}

Figures RawUcx::run_stream(const Cmd& c, const Link& link) {
  Figures f;
  if (link.role() > 1) return f;
  stream(link.raw_peer(), c.size, c.warmup, c.window, link.role() == 0);
  double s = stream(link.raw_peer(), c.size, c.iters, c.window, link.role() == 0);
  f.rate = c.iters / s;
  f.bw_mbps = static_cast<double>(c.size) * c.iters / s / 1e6;
  return f;
}

Figures RawUcx::run_fanin(const Cmd& c, const Link& link) {
  Figures f;
  if (link.cs()) return f;  // the raw loop's fan-in is to rank 0; cs mode's goes to the client
  auto held = fanin(link.size(), c.size, c.warmup + c.iters, c.window, kFaninHold, link.role() == 0);
  f.waiting = held.messages;
  f.waiting_bytes = static_cast<double>(held.bytes);
  return f;
}

}  // namespace sluice::perf
