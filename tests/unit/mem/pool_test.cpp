// Pools: exact exhaustion, direction isolation, growth limits, reservations, cross-thread
// release, NUMA placement, registration.
#include <atomic>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "mem/pool.h"

namespace sluice::detail {
namespace {

using ::testing::HasSubstr;

struct Fixture {
  explicit Fixture(Config c = Config()) : config(c) {
    auto t = Topology::load();
    EXPECT_TRUE(t.ok());
    topo = std::move(*t);
    auto u = TransportContext::create(config);
    EXPECT_TRUE(u.ok()) << u.status();
    ucx = std::move(*u);
    source = {topo.get(), ucx.get(), 0, HugePages::kTry, config.pool_chunk};
  }
  std::unique_ptr<Pool> make(Direction d) {
    auto p = Pool::create(d, config, eager_slot_size(config.eager_limit()), source);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::move(*p) : nullptr;
  }
  Config config;
  std::unique_ptr<Topology> topo;
  std::unique_ptr<TransportContext> ucx;
  ArenaSource source;
};

Config small(std::size_t send_max, std::size_t recv_max) {
  Config c;
  c.send_pool_max = send_max;
  c.recv_pool_max = recv_max;
  c.pool_chunk = 64 << 10;
  return c;
}

TEST(Pool, ExhaustionIsExact) {
  Fixture f(small(1 << 20, 1 << 20));
  auto pool = f.make(Direction::kSend);
  PoolClass& cls = pool->eager();
  std::vector<Slot> held;
  Slot s;
  while (cls.try_get(&s) == Result::kOk) {
    std::memset(s.data(), static_cast<int>(held.size() & 0xff), s.size());
    held.push_back(std::move(s));
  }
  const std::size_t n = held.size();
  EXPECT_EQ(n, (std::size_t{1} << 20) / cls.slot_size());
  EXPECT_EQ(cls.stats().slots_total, n);
  // The next one fails at once, and again; each failure is counted.
  std::uint64_t before = cls.stats().exhaustion_events;
  EXPECT_EQ(before, 1u);  // the one that ended the loop
  EXPECT_EQ(cls.try_get(&s), Result::kWouldBlock);
  EXPECT_EQ(cls.try_get(&s), Result::kWouldBlock);
  EXPECT_EQ(cls.stats().exhaustion_events, before + 2);
  // Held slots are intact and distinct.
  std::set<std::byte*> seen;
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_TRUE(seen.insert(held[i].data()).second);
    EXPECT_EQ(held[i].data()[0], static_cast<std::byte>(i & 0xff));
    EXPECT_EQ(held[i].data()[held[i].size() - 1], static_cast<std::byte>(i & 0xff));
  }
  held.clear();
  EXPECT_EQ(cls.stats().slots_free, n);
  EXPECT_EQ(cls.stats().high_water, n);
  // Full again: n more gets succeed.
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(cls.try_get(&s), Result::kOk);
    held.push_back(std::move(s));
  }
}

TEST(Pool, DirectionsAreIsolated) {
  Fixture f(small(512 << 10, 512 << 10));
  auto send = f.make(Direction::kSend);
  auto recv = f.make(Direction::kRecv);
  ASSERT_TRUE(recv->eager().reserve(16).ok());
  std::vector<Slot> sends;
  Slot s;
  while (send->eager().try_get(&s) == Result::kOk) sends.push_back(std::move(s));
  for (auto* cls : {send->class_for(64 << 10)})
    if (cls)
      while (cls->try_get(&s) == Result::kOk) sends.push_back(std::move(s));
  // The send side is dry; every reserved receive slot is still there.
  std::vector<Slot> recvs;
  for (int i = 0; i < 16; ++i) {
    ASSERT_EQ(recv->eager().try_get(&s), Result::kOk) << i;
    recvs.push_back(std::move(s));
  }
  EXPECT_EQ(recv->eager().try_get(&s), Result::kWouldBlock);  // only reserved capacity
  // And the other way round: the receive side dry, sends flow again once released.
  sends.clear();
  EXPECT_EQ(send->eager().try_get(&s), Result::kOk);
}

TEST(Pool, ReservationsNeverExceedTheBudget) {
  Fixture f(small(1 << 20, 256 << 10));
  auto recv = f.make(Direction::kRecv);
  std::size_t max = (256 << 10) / recv->eager().slot_size();
  EXPECT_TRUE(recv->eager().reserve(max).ok());
  auto more = recv->eager().reserve(1);
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(more.message()), HasSubstr("SLUICE_RECV_POOL_MAX"));
  // Large classes cannot take reserved capacity.
  PoolClass* large = recv->class_for(64 << 10);
  ASSERT_NE(large, nullptr);
  Slot s;
  EXPECT_EQ(large->try_get(&s), Result::kWouldBlock);
  recv->eager().unreserve(max);
  EXPECT_EQ(large->try_get(&s), Result::kOk);
}

TEST(Pool, GrowthStopsAtTheMaximumAndIsCounted) {
  Fixture f(small(1 << 20, 1 << 20));
  auto pool = f.make(Direction::kSend);
  EXPECT_EQ(pool->eager().stats().growth_events, 1u);  // starts with one chunk
  std::vector<Slot> held;
  Slot s;
  while (pool->eager().try_get(&s) == Result::kOk) held.push_back(std::move(s));
  auto st = pool->stats();
  EXPECT_LE(st.mapped_bytes, st.budget_bytes);
  EXPECT_GT(pool->eager().stats().growth_events, 1u);
  EXPECT_EQ(pool->eager().stats().slots_total, pool->eager().stats().slots_max);
}

TEST(Pool, MaximumBelowOneSlotIsAConfigurationError) {
  Config c;
  c.send_pool_max = 4096;
  auto v = c.validate();
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(std::string(v.message()), HasSubstr("SLUICE_SEND_POOL_MAX=4K is smaller than one eager slot"));
  // A growth chunk above the budget is not an error: growth maps no more than the budget has.
  Config chunk;
  chunk.pool_chunk = 512 << 20;
  EXPECT_TRUE(chunk.validate().ok());
}

TEST(Pool, DeadlineGetProgressesThenFails) {
  Fixture f(small(64 << 10, 1 << 20));
  auto pool = f.make(Direction::kSend);
  std::vector<Slot> held;
  Slot s;
  while (pool->eager().try_get(&s) == Result::kOk) held.push_back(std::move(s));
  int progressed = 0;
  auto r =
      pool->eager().get(&s, std::chrono::steady_clock::now() + std::chrono::milliseconds(20), [&] { ++progressed; });
  EXPECT_EQ(r, Result::kDeadlineExceeded);
  EXPECT_GT(progressed, 0);
  // A release during progress satisfies the wait.
  r = pool->eager().get(&s, std::chrono::steady_clock::now() + std::chrono::seconds(5), [&] { held.pop_back(); });
  EXPECT_EQ(r, Result::kOk);
}

TEST(Pool, CrossThreadReleaseLosesNothingAndDuplicatesNothing) {
  Fixture f(small(4 << 20, 1 << 20));
  auto pool = f.make(Direction::kSend);
  PoolClass& cls = pool->eager();
  const std::size_t total = [&] {
    std::vector<Slot> all;
    Slot s;
    while (cls.try_get(&s) == Result::kOk) all.push_back(std::move(s));
    return all.size();
  }();
  constexpr int kThreads = 4;
  constexpr int kRounds = 20000;
  std::vector<std::vector<Slot>> inbox(kThreads);
  std::vector<std::atomic<int>> ready(kThreads);
  std::atomic<bool> stop{false};
  std::mutex mu[kThreads];
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      while (!stop.load()) {
        std::vector<Slot> mine;
        {
          std::lock_guard lock(mu[t]);
          mine.swap(inbox[static_cast<std::size_t>(t)]);
        }
        mine.clear();  // released on this (non-owner) thread
      }
    });
  }
  std::set<std::byte*> out;
  int handed = 0;
  for (int i = 0; i < kRounds; ++i) {
    Slot s;
    if (cls.try_get(&s) != Result::kOk) continue;
    std::memset(s.data(), 0x5c, 64);
    ++handed;
    std::lock_guard lock(mu[i % kThreads]);
    inbox[static_cast<std::size_t>(i % kThreads)].push_back(std::move(s));
  }
  // The releasing threads empty their inboxes themselves (on a loaded machine they may not
  // have run at all yet), so every slot goes back from a non-owner thread.
  auto inboxes_empty = [&] {
    for (int t = 0; t < kThreads; ++t) {
      std::lock_guard lock(mu[t]);
      if (!inbox[static_cast<std::size_t>(t)].empty()) return false;
    }
    return true;
  };
  while (!inboxes_empty()) std::this_thread::yield();
  stop = true;
  for (auto& t : threads) t.join();
  // Every slot comes back exactly once: all `total` can be taken again, all distinct.
  std::vector<Slot> again;
  Slot s;
  while (cls.try_get(&s) == Result::kOk) {
    EXPECT_TRUE(out.insert(s.data()).second) << "slot handed out twice";
    again.push_back(std::move(s));
  }
  EXPECT_EQ(again.size(), total);
  EXPECT_GT(cls.stats().cross_thread_returns, 0u);
  EXPECT_GT(handed, 0);
}

TEST(Pool, HeldBackSendCapacityIsOnlyForReservedTakers) {
  // Reply capacity: with 8 slots held back, ordinary sends stop 8 short of the budget, the 8
  // stay for try_get_reserved, and once they are out a reserved taker uses ordinary capacity.
  Fixture f(small(1 << 20, 1 << 20));
  auto pool = f.make(Direction::kSend);
  PoolClass& cls = pool->eager();
  const std::size_t n = (std::size_t{1} << 20) / cls.slot_size();
  ASSERT_TRUE(cls.reserve(8).ok());
  std::vector<Slot> ordinary, replies;
  Slot s;
  // Held back is not mapped ahead: the first take comes from the first chunk (64 KiB).
  std::size_t before = cls.stats().slots_total;
  ASSERT_EQ(cls.try_get(&s), Result::kOk);
  ordinary.push_back(std::move(s));
  EXPECT_EQ(cls.stats().slots_total, before);
  while (cls.try_get(&s) == Result::kOk) ordinary.push_back(std::move(s));
  EXPECT_EQ(ordinary.size(), n - 8);
  while (cls.try_get_reserved(&s) == Result::kOk) replies.push_back(std::move(s));
  EXPECT_EQ(replies.size(), 8u);
  // A held-back slot returned is held back again: not for an ordinary taker.
  replies.pop_back();
  EXPECT_EQ(cls.try_get(&s), Result::kWouldBlock);
  ASSERT_EQ(cls.try_get_reserved(&s), Result::kOk);
  replies.push_back(std::move(s));
  // Ordinary slots returned serve a reserved taker too once its own are out.
  ordinary.pop_back();
  ASSERT_EQ(cls.try_get_reserved(&s), Result::kOk);
  replies.push_back(std::move(s));
  // Unreserving releases the capacity to everyone.
  replies.clear();
  ordinary.clear();
  cls.unreserve(8);
  while (cls.try_get(&s) == Result::kOk) ordinary.push_back(std::move(s));
  EXPECT_EQ(ordinary.size(), n);
  // A reservation the budget cannot back is refused, naming the variable.
  ordinary.clear();
  absl::Status st = cls.reserve(n + 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(st.message()), HasSubstr("SLUICE_SEND_POOL_MAX"));
}

TEST(Arena, PagesLandOnTheRequestedNode) {
  auto topo = Topology::load();
  ASSERT_TRUE(topo.ok());
  int node = (*topo)->nodes().back().os_index;
  auto arena = Arena::create(1 << 20, HugePages::kNo, node, topo->get(), nullptr);
  ASSERT_TRUE(arena.ok()) << arena.status();
  EXPECT_EQ((*topo)->node_of_memory((*arena)->data(), (*arena)->length()), node);
}

TEST(Arena, HugePagesTryFallsBackCleanly) {
  auto arena = Arena::create(1 << 20, HugePages::kTry, -1, nullptr, nullptr);
  ASSERT_TRUE(arena.ok()) << arena.status();
  EXPECT_GE((*arena)->length(), std::size_t{1} << 20);
}

TEST(Arena, HugePagesYesFailsClearlyWhenThereAreNone) {
  auto arena = Arena::create(1 << 20, HugePages::kYes, -1, nullptr, nullptr);
  if (arena.ok()) GTEST_SKIP() << "this machine has 2M huge pages reserved";
  EXPECT_THAT(std::string(arena.status().message()), HasSubstr("SLUICE_HUGEPAGES=yes"));
}

TEST(Registration, SlotMemoryHandleCarriesATaggedTransfer) {
  Fixture f;
  auto send = f.make(Direction::kSend);
  auto recv = f.make(Direction::kRecv);
  ASSERT_TRUE(recv->eager().reserve(1).ok());
  auto w1 = Worker::create(*f.ucx);
  auto w2 = Worker::create(*f.ucx);
  ASSERT_TRUE(w1.ok() && w2.ok());
  auto ep = (*w1)->connect((*w2)->address(), [](void*, int) {}, nullptr);
  ASSERT_TRUE(ep.ok()) << ep.status();
  Slot out, in;
  ASSERT_EQ(send->eager().try_get(&out), Result::kOk);
  ASSERT_EQ(recv->eager().try_get(&in), Result::kOk);
  ASSERT_NE(slot_memh(out), nullptr);
  for (std::size_t i = 0; i < out.size(); ++i) out.data()[i] = static_cast<std::byte>(i * 7);
  struct Done : TransportOp {
    bool done = false;
    absl::StatusCode code{};
    std::size_t len = 0;
  } sop, rop;
  auto cb = [](TransportOp* op, absl::StatusCode code, std::size_t len, Tag) {
    auto* d = static_cast<Done*>(op);
    d->done = true;
    d->code = code;
    d->len = len;
  };
  sop.on_complete = rop.on_complete = cb;
  auto r = (*w2)->post_recv(Endpoint(), &rop, in.data(), in.size(), 42, kFullMask, slot_memh(in));
  ASSERT_EQ(r.kind, Post::kPending) << "nothing was sent yet";
  auto s = ep->post_send(&sop, out.data(), out.size(), 42, slot_memh(out));
  if (s.kind == Post::kDone) sop.done = true;
  ASSERT_NE(s.kind, Post::kError);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!(sop.done && rop.done) && std::chrono::steady_clock::now() < deadline) {
    (*w1)->progress();
    (*w2)->progress();
  }
  ASSERT_TRUE(rop.done);
  EXPECT_EQ(rop.code, absl::StatusCode::kOk);
  EXPECT_EQ(rop.len, out.size());
  EXPECT_EQ(std::memcmp(in.data(), out.data(), out.size()), 0);
  *ep = Endpoint();
  for (int i = 0; i < 100; ++i) (*w1)->progress();
}

TEST(Pool, LandingArenasAreKeptForReuseAndCountAgainstTheBudget) {
  Config c = small(1 << 20, 16 << 20);
  c.pool_chunk = 2 << 20;
  Fixture f(c);
  auto recv = f.make(Direction::kRecv);
  ASSERT_TRUE(recv->eager().prime().ok());  // as an engine does; that chunk is never unmapped
  auto large = [&] { return recv->stats().classes.back(); };
  ASSERT_EQ(large().name, "recv.large");
  Slot a, b, d;
  ASSERT_EQ(recv->try_take_landing(6 << 20, &a), Result::kOk);  // beyond the 4M class
  EXPECT_EQ(a.size(), std::size_t{6} << 20);
  ASSERT_NE(slot_memh(a), nullptr) << "registered";
  std::byte* first = a.data();
  a.release();
  ASSERT_EQ(recv->try_take_landing(5 << 20, &a), Result::kOk);
  EXPECT_EQ(a.data(), first) << "the kept arena serves the next payload it fits";
  EXPECT_EQ(large().growth_events, 1u);
  ASSERT_EQ(recv->try_take_landing(6 << 20, &b), Result::kOk);
  EXPECT_EQ(large().growth_events, 2u);
  // 12 MiB held (and the eager class's first chunk mapped): no room for 6 more under 16 MiB.
  EXPECT_EQ(recv->try_take_landing(6 << 20, &d), Result::kWouldBlock);
  EXPECT_LE(recv->budget().mapped, recv->budget().max);
  b.release();
  EXPECT_EQ(recv->try_take_landing(6 << 20, &d), Result::kOk) << "room once one is given back";
  EXPECT_TRUE(recv->can_ever_land(12 << 20));
  EXPECT_FALSE(recv->can_ever_land(16 << 20)) << "beyond the budget, whatever is released";
}

TEST(Pool, APayloadLandsInAnArenaWhenTheClassThatWouldHoldItExceedsTheBudget) {
  // 4 MiB of receive budget, the default classes (64K, 1M, 4M): a 4M slot never fits beside the
  // eager class's reservations, but a 2 MiB landing arena does, so a 2 MiB payload can land; a
  // 4 MiB one never can.
  Fixture f(small(1 << 20, 4 << 20));
  auto recv = f.make(Direction::kRecv);
  ASSERT_TRUE(recv->eager().reserve(16).ok());
  EXPECT_TRUE(recv->can_ever_land(2 << 20)) << "a landing arena holds it";
  Slot s;
  ASSERT_EQ(recv->try_take_landing(2 << 20, &s), Result::kOk) << "and really does";
  s.release();
  EXPECT_FALSE(recv->can_ever_land(4 << 20));
  EXPECT_FALSE(recv->try_take_landing(4 << 20, &s) == Result::kOk);
  // 1 MiB of budget: a 2 MiB arena never fits either.
  Fixture g(small(1 << 20, 1 << 20));
  auto tiny = g.make(Direction::kRecv);
  ASSERT_TRUE(tiny->eager().reserve(16).ok());
  EXPECT_TRUE(tiny->can_ever_land(64 << 10));
  EXPECT_FALSE(tiny->can_ever_land(2 << 20));
}

TEST(Pool, ReservedSlotsTheEagerClassHasMappedCountOnceAgainstLandings) {
  // 6 MiB of receive budget; 2.4 MiB of eager reservations (what a few peers' loans reach).
  Config c = small(1 << 20, 6 << 20);
  c.pool_chunk = 256 << 10;
  Fixture f(c);
  auto recv = f.make(Direction::kRecv);
  PoolClass& eager = recv->eager();
  const std::size_t n = (std::size_t{2400} << 10) / eager.slot_size();
  ASSERT_TRUE(eager.reserve(n).ok());
  // Not mapped yet: the reservations are owed to the eager class, so landings have the rest.
  EXPECT_GE(recv->landing_room(), (std::size_t{6} << 20) - n * eager.slot_size() - (256 << 10));
  // Every reserved slot used once (its chunks mapped, and never unmapped), then given back.
  std::vector<Slot> used(n);
  for (Slot& s : used) ASSERT_EQ(eager.try_take(&s), Result::kOk);
  used.clear();
  ASSERT_GE(eager.mapped_bytes(), n * eager.slot_size());
  // The mapped slots back the reservations: counted once, not as reservation plus mapping
  // (which left 1.2 MiB and refused a 2 MiB payload as one this budget "can never hold").
  EXPECT_EQ(recv->landing_room(), (std::size_t{6} << 20) - eager.mapped_bytes());
  EXPECT_TRUE(recv->can_ever_land(2 << 20));
  Slot landing;
  EXPECT_EQ(recv->try_take_landing(2 << 20, &landing), Result::kOk) << "and it lands now";
  landing.release();
  ASSERT_GE(recv->reclaim(std::size_t{2} << 20), std::size_t{2} << 20);  // its kept arena
  // Reservations beyond what is mapped still keep landings out of their room.
  const std::size_t more = (std::size_t{2} << 20) / eager.slot_size();
  ASSERT_TRUE(eager.reserve(more).ok());
  EXPECT_EQ(recv->landing_room(), (std::size_t{6} << 20) - (n + more) * eager.slot_size());
  EXPECT_FALSE(recv->can_ever_land(2 << 20));
}

TEST(Pool, MemoryNobodyHoldsIsUnmappedWhenALandingNeedsTheRoom) {
  Config c = small(1 << 20, 16 << 20);
  c.pool_chunk = 2 << 20;
  Fixture f(c);
  auto recv = f.make(Direction::kRecv);
  // The 1M class takes the whole budget, then gives every slot back (still mapped).
  std::vector<Slot> held;
  Slot s;
  while (recv->try_take_landing(1 << 20, &s) == Result::kOk) held.push_back(std::move(s));
  EXPECT_GE(held.size(), 12u);
  held.clear();
  std::size_t mapped = recv->budget().mapped;
  EXPECT_GT(mapped, std::size_t{12} << 20);
  // A 10 MiB landing fits only if those free chunks go; they do, and the budget holds.
  Slot big;
  ASSERT_EQ(recv->try_take_landing(10 << 20, &big), Result::kOk);
  EXPECT_LE(recv->budget().mapped, recv->budget().max);
  // And the other way round: the 1M class grows again into the room a kept arena gives up.
  big.release();
  while (recv->try_take_landing(1 << 20, &s) == Result::kOk) held.push_back(std::move(s));
  EXPECT_GE(held.size(), 12u) << "the kept 10 MiB arena was unmapped for them";
  EXPECT_LE(recv->budget().mapped, recv->budget().max);
}

TEST(Pool, ASmallLandingBorrowsAFreeSlotOfALargerClass) {
  Config c = small(1 << 20, 16 << 20);
  c.pool_chunk = 8 << 20;
  c.pool_classes = {64 << 10, 4 << 20};
  Fixture f(c);
  auto recv = f.make(Direction::kRecv);
  // One 8 MiB chunk of two 4M slots, one of them held: the chunk cannot be unmapped.
  Slot four, other;
  ASSERT_EQ(recv->try_take_landing(4 << 20, &four), Result::kOk);
  ASSERT_EQ(recv->try_take_landing(4 << 20, &other), Result::kOk);
  other.release();
  // 64K slots fill the rest of the budget; one more 64K landing takes the free 4M slot rather
  // than waiting.
  std::vector<Slot> held;
  Slot s;
  while (recv->class_for(64 << 10)->try_take(&s) == Result::kOk) held.push_back(std::move(s));
  EXPECT_EQ(held.size(), 128u);
  ASSERT_EQ(recv->try_take_landing(64 << 10, &s), Result::kOk);
  EXPECT_EQ(s.size(), std::size_t{4} << 20);
}

}  // namespace
}  // namespace sluice::detail
