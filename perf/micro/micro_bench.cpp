// Micro benchmarks of the hot-path pieces: pool get/put (against malloc/free and a
// mutex-protected free list, on one thread and with releases from another), wire header
// encode/decode, tag encode/decode, credit accounting, handler dispatch.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/copy.h"
#include "flow/flow.h"
#include "mem/pool.h"
#include "wire/wire.h"

namespace sluice::detail {
namespace {

struct PoolEnv {
  PoolEnv() {
    config.send_pool_max = std::size_t{64} << 20;
    topo = std::move(*Topology::load());
    ucx = std::move(*TransportContext::create(config));
    source = {topo.get(), ucx.get(), -1, HugePages::kTry, config.pool_chunk};
    pool = std::move(*Pool::create(Direction::kSend, config, eager_slot_size(config.eager_limit()), source));
  }
  Config config;
  std::unique_ptr<Topology> topo;
  std::unique_ptr<TransportContext> ucx;
  ArenaSource source;
  std::unique_ptr<Pool> pool;
};

PoolEnv& env() {
  static PoolEnv e;
  return e;
}

// Also times malloc/free of a slot-sized block the same number of times and reports
// pool_vs_malloc = pool time / malloc time (below 1: the pool is faster).
void BM_Pool_GetPut(benchmark::State& state) {
  PoolClass& cls = env().pool->eager();
  cls.set_owner(std::this_thread::get_id());
  auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    Slot s;
    if (cls.try_get(&s) != Result::kOk) state.SkipWithError("pool empty");
    benchmark::DoNotOptimize(s.data());
  }
  auto t1 = std::chrono::steady_clock::now();
  std::size_t n = eager_slot_size(8192);
  for (benchmark::IterationCount i = 0; i < state.iterations(); ++i) {
    void* p = std::malloc(n);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
  auto t2 = std::chrono::steady_clock::now();
  state.counters["pool_vs_malloc"] =
      std::chrono::duration<double>(t1 - t0).count() / std::chrono::duration<double>(t2 - t1).count();
}
BENCHMARK(BM_Pool_GetPut);

void BM_Malloc_FreeSlotSize(benchmark::State& state) {
  std::size_t n = eager_slot_size(8192);
  for (auto _ : state) {
    void* p = std::malloc(n);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}
BENCHMARK(BM_Malloc_FreeSlotSize);

// The alternative Sluice does not take: one free list behind a mutex.
struct MutexFreeList {
  std::mutex mu;
  std::vector<void*> free;
  void* get() {
    std::lock_guard l(mu);
    void* p = free.back();
    free.pop_back();
    return p;
  }
  void put(void* p) {
    std::lock_guard l(mu);
    free.push_back(p);
  }
};

void BM_MutexFreeList_GetPut(benchmark::State& state) {
  static std::vector<std::byte> mem(std::size_t{1} << 20);
  MutexFreeList fl;
  for (std::size_t i = 0; i < 64; ++i) fl.free.push_back(mem.data() + i * 8256);
  for (auto _ : state) {
    void* p = fl.get();
    benchmark::DoNotOptimize(p);
    fl.put(p);
  }
}
BENCHMARK(BM_MutexFreeList_GetPut);

// Slots taken on the owner thread and released on another (the cross-thread return path).
void BM_Pool_GetCrossThreadRelease(benchmark::State& state) {
  PoolClass& cls = env().pool->eager();
  cls.set_owner(std::this_thread::get_id());
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<Slot> handoff;
  std::thread releaser([&] {
    std::vector<Slot> mine;
    while (!stop.load(std::memory_order_relaxed)) {
      {
        std::lock_guard l(mu);
        mine.swap(handoff);
      }
      mine.clear();
    }
  });
  std::vector<Slot> batch;
  for (auto _ : state) {
    Slot s;
    while (cls.try_get(&s) != Result::kOk) {}
    batch.push_back(std::move(s));
    if (batch.size() == 64) {
      std::lock_guard l(mu);
      for (auto& b : batch) handoff.push_back(std::move(b));
      batch.clear();
    }
  }
  stop = true;
  releaser.join();
  batch.clear();
  handoff.clear();
}
BENCHMARK(BM_Pool_GetCrossThreadRelease);

void BM_MutexFreeList_CrossThreadRelease(benchmark::State& state) {
  static std::vector<std::byte> mem(std::size_t{64} << 20);
  MutexFreeList fl;
  for (std::size_t i = 0; i < 8000; ++i) fl.free.push_back(mem.data() + i * 8256);
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<void*> handoff;
  std::thread releaser([&] {
    std::vector<void*> mine;
    while (!stop.load(std::memory_order_relaxed)) {
      {
        std::lock_guard l(mu);
        mine.swap(handoff);
      }
      for (void* p : mine) fl.put(p);
      mine.clear();
    }
  });
  std::vector<void*> batch;
  for (auto _ : state) {
    void* p = nullptr;
    while (p == nullptr) {
      std::lock_guard l(fl.mu);
      if (!fl.free.empty()) {
        p = fl.free.back();
        fl.free.pop_back();
      }
    }
    batch.push_back(p);
    if (batch.size() == 64) {
      std::lock_guard l(mu);
      handoff.insert(handoff.end(), batch.begin(), batch.end());
      batch.clear();
    }
  }
  stop = true;
  releaser.join();
}
BENCHMARK(BM_MutexFreeList_CrossThreadRelease);

void BM_Wire_Encode(benchmark::State& state) {
  wire::Header h{wire::kFlagRequest, 7, 16, 8, 3, 0, 42, 41, 9, 0};
  std::byte buf[wire::kHeaderSize];
  for (auto _ : state) {
    h.seq++;
    wire::encode(h, buf);
    benchmark::DoNotOptimize(buf);
  }
}
BENCHMARK(BM_Wire_Encode);

void BM_Wire_Decode(benchmark::State& state) {
  wire::Header h{0, 7, 16, 8, 3, 0, 42, 41, 9, 0};
  std::vector<std::byte> buf(wire::kHeaderSize + 24);
  wire::encode(h, buf.data());
  wire::Header out;
  for (auto _ : state) {
    benchmark::DoNotOptimize(wire::decode(buf, &out));
    benchmark::DoNotOptimize(out);
  }
}
BENCHMARK(BM_Wire_Decode);

// The compact header of a plain message with 8 bytes of payload: what every small send writes
// and every small receive parses.
void BM_Wire_CompactEncode(benchmark::State& state) {
  std::byte buf[wire::kCompactHeaderSize];
  std::uint64_t seq = 0;
  for (auto _ : state) {
    wire::encode_compact(0, 7, 0, 1, 0, ++seq, 0, buf);
    benchmark::DoNotOptimize(buf);
  }
}
BENCHMARK(BM_Wire_CompactEncode);

void BM_Wire_CompactDecode(benchmark::State& state) {
  std::vector<std::byte> buf(wire::kCompactHeaderSize + 8);
  wire::encode_compact(0, 7, 0, 1, 0, 42, 0, buf.data());
  wire::Header out;
  for (auto _ : state) {
    benchmark::DoNotOptimize(wire::decode(buf, &out));
    benchmark::DoNotOptimize(out);
  }
}
BENCHMARK(BM_Wire_CompactDecode);

void BM_Tag_EncodeDecode(benchmark::State& state) {
  std::uint64_t seq = 0;
  for (auto _ : state) {
    std::uint64_t t = wire::make_tag(wire::kEager, 12345, ++seq);
    benchmark::DoNotOptimize(wire::tag_index(t) + wire::tag_id(t) + wire::tag_class(t));
  }
}
BENCHMARK(BM_Tag_EncodeDecode);

void BM_Credit_SpendAndReturn(benchmark::State& state) {
  SendCredits send;
  CreditReturn ret;
  send.grant(32);
  ret.grant(32);
  for (auto _ : state) {
    if (!send.try_consume()) state.SkipWithError("no credit");
    ret.released();
    if (ret.explicit_due()) send.give_back(ret.take());
    benchmark::DoNotOptimize(send.available());
  }
  send.give_back(ret.take());
}
BENCHMARK(BM_Credit_SpendAndReturn);

void BM_Handler_Dispatch(benchmark::State& state) {
  // The handler table as the engine holds it: std::function by id.
  std::vector<std::function<void(int&)>> table(1024);
  int hits = 0;
  for (int i = 0; i < 1024; ++i) table[static_cast<std::size_t>(i)] = [&hits](int& v) { hits += v; };
  int v = 1;
  std::uint16_t id = 0;
  for (auto _ : state) {
    id = static_cast<std::uint16_t>((id + 7) & 1023);
    table[id](v);
  }
  benchmark::DoNotOptimize(hits);
}
BENCHMARK(BM_Handler_Dispatch);

void BM_Reorder_InOrderFastPath(benchmark::State& state) {
  ReorderWindow<int> w;
  std::uint64_t seq = 1;
  for (auto _ : state) benchmark::DoNotOptimize(w.take_in_order(seq++));
}
BENCHMARK(BM_Reorder_InOrderFastPath);

}  // namespace
}  // namespace sluice::detail

// copy_payload against glibc's memcpy, the same bytes and placement, timed alternately in one
// run: args {size, gap}, the destination `gap` bytes after the source modulo 4 KiB (1-31: where
// glibc's `rep movsb` is slow on AMD EPYC; 64: an ordinary placement). Reports
// copy_vs_memcpy = copy_payload time / memcpy time (below 1: copy_payload is faster).
void BM_CopyPayload(benchmark::State& state) {
  auto n = static_cast<std::size_t>(state.range(0));
  auto gap = static_cast<std::size_t>(state.range(1));
  static std::vector<std::byte> src_mem(std::size_t{3} << 20), dst_mem(std::size_t{3} << 20);
  auto page = [](std::vector<std::byte>& v) {
    auto a = reinterpret_cast<std::uintptr_t>(v.data());
    return v.data() + ((4096 - a % 4096) % 4096);
  };
  std::byte* src = page(src_mem);
  std::byte* dst = page(dst_mem) + gap;
  std::chrono::duration<double> ours{}, libc{};
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    sluice::detail::copy_payload(dst, src, n);
    benchmark::ClobberMemory();
    auto t1 = std::chrono::steady_clock::now();
    std::memcpy(dst, src, n);
    benchmark::ClobberMemory();
    ours += t1 - t0;
    libc += std::chrono::steady_clock::now() - t1;
  }
  state.counters["copy_vs_memcpy"] = ours.count() / libc.count();
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * 2));
}
BENCHMARK(BM_CopyPayload)->ArgsProduct({{4096, 65536, 262144}, {8, 16, 64}});

BENCHMARK_MAIN();
