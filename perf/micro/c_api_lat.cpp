// c_api_lat: what the C API costs on the latency path. Two ranks bounce an 8-byte message
// (am_lat) through the C++ API and through the C API in alternating blocks on the same engine,
// so both see the same machine at the same time, and rank 0 prints each one's median one-way
// latency and their ratio (C / C++). Links the shared library, as applications do.
//
//   build/apps/sluice-run -n 2 --bind core build/perf/c-api-lat [BLOCKS] [ROUNDS_PER_BLOCK] [SIZE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <sluice/sluice.h>
#include <sluice/sluice_c.h>

#include "c/c_api.h"  // the handle casts: one engine seen through both APIs

namespace {

constexpr sluice::HandlerId kCxx = 1;  // answered through the C++ API
constexpr std::uint16_t kC = 2;        // answered through the C API

struct Side {
  sluice::Peer* peer = nullptr;  // the other rank, C++ handle
  slc_peer_t* cpeer = nullptr;   // the same peer, C handle
  std::vector<std::byte> payload;
  int me = 0;
  long replies = 0;
};

void on_c(slc_msg_t*, void* user_data) {
  auto* s = static_cast<Side*>(user_data);
  if (s->me == 1) {
    while (slc_send(s->cpeer, kC, s->payload.data(), s->payload.size(), nullptr) == SLC_ERR_WOULD_BLOCK) {}
  } else {
    ++s->replies;
  }
}

// One block of `rounds` round trips through one API; returns each round trip's seconds.
void block(slc_engine_t* ceng, sluice::Engine& eng, Side& s, bool c_api, int rounds, std::vector<double>& out) {
  for (int i = 0; i < rounds; ++i) {
    long want = s.replies + 1;
    auto t0 = sluice::Clock::now();
    if (c_api) {
      while (slc_send(s.cpeer, kC, s.payload.data(), s.payload.size(), nullptr) == SLC_ERR_WOULD_BLOCK)
        slc_engine_progress(ceng);
      while (s.replies < want) slc_engine_progress(ceng);
    } else {
      while (s.peer->send(kCxx, s.payload) == sluice::Result::kWouldBlock) eng.progress();
      while (s.replies < want) eng.progress();
    }
    out.push_back(std::chrono::duration<double>(sluice::Clock::now() - t0).count());
  }
}

double median_us(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2] / 2 * 1e6;  // one way
}

int fail(const char* what, std::int32_t status) {
  std::fprintf(stderr, "c-api-lat: %s: %s (%s)\n", what, slc_strerror(status), slc_last_error());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  int blocks = argc > 1 ? std::atoi(argv[1]) : 20;
  int rounds = argc > 2 ? std::atoi(argv[2]) : 2000;
  std::size_t size = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 8;
  slc_context_t* ctx = nullptr;
  slc_engine_t* ceng = nullptr;
  std::int32_t r;
  if ((r = slc_init()) != SLC_OK || (r = slc_context_create(nullptr, &ctx)) != SLC_OK) return fail("context", r);
  if (slc_context_size(ctx) != 2) return fail("run with two ranks (sluice-run -n 2)", SLC_ERR_INVALID);
  if ((r = slc_engine_create(ctx, nullptr, &ceng)) != SLC_OK) return fail("engine", r);
  sluice::Engine& eng = *sluice::capi::engine_of(ceng);
  Side s;
  s.me = eng.rank();
  s.payload.resize(size);
  s.peer = eng.peer(1 - s.me);
  s.cpeer = sluice::capi::handle_of(s.peer);
  if ((r = slc_engine_register(ceng, kC, on_c, &s, nullptr)) != SLC_OK) return fail("register", r);
  auto registered = eng.register_handler(kCxx, [&s](sluice::Message&) {
    if (s.me == 0) {
      ++s.replies;
      return;
    }
    while (s.peer->send(kCxx, s.payload) == sluice::Result::kWouldBlock) {}
  });
  if (!registered.ok()) return fail("register", SLC_ERR_INVALID);
  if ((r = slc_engine_barrier(ceng, SLC_TIMEOUT_INFINITE)) != SLC_OK) return fail("barrier", r);
  if (s.me == 0) {
    std::vector<double> cxx, c;
    block(ceng, eng, s, false, rounds, cxx);  // warm-up of both, not counted
    block(ceng, eng, s, true, rounds, c);
    cxx.clear(), c.clear();
    for (int b = 0; b < blocks; ++b) {
      block(ceng, eng, s, b % 2 != 0, rounds, b % 2 != 0 ? c : cxx);
      block(ceng, eng, s, b % 2 == 0, rounds, b % 2 == 0 ? c : cxx);
    }
    double a = median_us(cxx), b = median_us(c);
    std::printf("c-api-lat: am_lat %zu B one way, median of %zu round trips each: C++ %.3f us, C %.3f us, ratio %.4f\n",
                size, c.size(), a, b, b / a);
  }
  // Rank 1 answers until rank 0 is done; the barrier then lets both close.
  if ((r = slc_engine_barrier(ceng, SLC_TIMEOUT_INFINITE)) != SLC_OK) return fail("barrier", r);
  slc_engine_destroy(ceng);
  slc_context_destroy(ctx);
  return 0;
}
