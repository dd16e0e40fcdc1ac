// What a newcomer does on a first day (issue "a newcomer's first day without a trap"): each
// case is a mistake or a need that used to crash, lose messages or have no clean way, and now
// has one.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sluice/context.h>

#include "testing/payload.h"
#include "testing/ranks.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
using testing_support::bytes_of;
using testing_support::RankPair;

constexpr HandlerId kData = 5;
const auto kLong = std::chrono::seconds(60);

void drive(Engine& e, const std::function<bool()>& done) { ASSERT_TRUE(e.run_until(done, Clock::now() + kLong)); }

TEST(Lifetime, AContextDestroyedBeforeItsEngineLeavesTheEngineWorking) {
  // The order a class gets when it declares its engine before its context.
  struct Service {
    std::unique_ptr<Engine> engine;
    std::unique_ptr<Context> context;
  };
  auto service = std::make_unique<Service>();
  auto ctx = Context::create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  service->context = std::move(*ctx);
  auto eng = service->context->create_engine();
  ASSERT_TRUE(eng.ok()) << eng.status();
  service->engine = std::move(*eng);
  service->context.reset();  // the engine keeps what it uses of it
  Engine& e = *service->engine;
  int got = 0;
  ASSERT_TRUE(e.register_handler(kData, [&](Message& m) { got += static_cast<int>(m.payload().size()); }).ok());
  std::vector<std::byte> big(std::size_t{1} << 20);  // a rendezvous: registered memory
  ASSERT_EQ(e.peer(0)->send(kData, {}, big), Result::kOk);
  drive(e, [&] { return got == static_cast<int>(big.size()); });
  service.reset();  // the engine, then the UCX context with it: no abort
}

TEST(Threads, APeerLooksUpFromAnyThreadAndEachRefusedMethodIsLoggedOnce) {
  RankPair pair;
  Engine& e = pair.engine(0);
  e.progress();  // this thread drives it
  ::testing::internal::CaptureStderr();
  Peer* looked_up = nullptr;
  Result sent = Result::kOk;
  std::uint64_t sent_msgs = 1;
  std::thread worker([&] {
    looked_up = e.peer(1);
    for (int i = 0; i < 3; ++i) {
      sent = looked_up->send_copy(kData, {}, bytes_of(i));
      sent_msgs = e.stats().value("am.msgs_sent");
    }
  });
  worker.join();
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(looked_up, e.peer(1)) << "nullptr means no such rank, nothing else";
  EXPECT_EQ(sent, Result::kInvalidArgument);
  EXPECT_EQ(sent_msgs, 0u) << "another thread's stats() is empty";
  EXPECT_THAT(log, HasSubstr("Peer::send_copy called on thread"));
  EXPECT_THAT(log, HasSubstr("Engine::stats called on thread")) << "no refusal is silent";
  EXPECT_EQ(e.stats().value("api.wrong_thread"), 6u);
  EXPECT_EQ(e.peer(2), nullptr);
  EXPECT_EQ(e.peer(-1), nullptr);
}

TEST(Threads, FourProducerThreadsSubmitSendsThatAllArriveInOrderWithoutBusyRetries) {
  Config c;
  c.credits = 4;  // the sends meet would-block often
  c.send_queue_max = 8;
  RankPair pair(c);
  constexpr int kThreads = 4, kEach = 2000;
  std::vector<int> last(kThreads, -1);
  std::atomic<int> received{0};
  int out_of_order = 0;
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kData,
                                    [&](Message& m) {
                                      int v[2];
                                      std::memcpy(v, m.payload().data(), sizeof(v));
                                      out_of_order += v[1] != last[v[0]] + 1;
                                      last[v[0]] = v[1];
                                      ++received;
                                    })
                  .ok());
  std::atomic<int> attempts{0}, answered_ok{0};
  pair.run(
      [&](Engine& e) {
        Peer* peer = e.peer(1);
        std::atomic<int> producers_done{0};
        std::vector<std::thread> producers;
        for (int t = 0; t < kThreads; ++t)
          producers.emplace_back([&, t] {
            for (int i = 0; i < kEach; ++i) {
              int v[2] = {t, i};
              Result queued = e.submit([&, v] {
                ++attempts;
                Result r = peer->send_copy(kData, std::as_bytes(std::span(v)));
                answered_ok += r == Result::kOk;
                return r;
              });
              ASSERT_EQ(queued, Result::kOk);
            }
            ++producers_done;
            e.post([] {});  // wakes the engine to see the count
          });
        // kOk from send_copy means queued: this engine sends them as credits come back.
        drive(e, [&] { return producers_done == kThreads && received == kThreads * kEach; });
        for (auto& p : producers) p.join();
      },
      [&](Engine& e) { drive(e, [&] { return received == kThreads * kEach; }); });
  EXPECT_EQ(received.load(), kThreads * kEach);
  EXPECT_EQ(answered_ok.load(), kThreads * kEach);
  EXPECT_EQ(out_of_order, 0);
  // A send that would block is retried when the engine has done something, not in a loop:
  // well under the 345,782 retries a post() that re-posts itself took for 8,000 sends.
  EXPECT_LT(attempts.load(), 4 * kThreads * kEach) << attempts.load() << " attempts";
  EXPECT_GT(attempts.load(), kThreads * kEach) << "some sends met would-block";
  std::printf("%d attempts for %d sends\n", attempts.load(), kThreads * kEach);
}

TEST(Threads, AFullSubmitQueueHoldsTheProducerUntilItsDeadline) {
  RankPair pair;
  Engine& e = pair.engine(0);
  e.progress();  // this thread drives it, and does not progress while the producer fills it
  Result last = Result::kOk;
  int queued = 0;
  std::thread producer([&] {
    while ((last = e.submit([] { return Result::kOk; }, Clock::now() + std::chrono::milliseconds(50))) == Result::kOk)
      ++queued;
  });
  producer.join();
  EXPECT_EQ(last, Result::kWouldBlock);
  EXPECT_EQ(queued, 4096);
  e.progress();  // runs them all: room again
  EXPECT_EQ(e.submit([] { return Result::kOk; }, Clock::now()), Result::kOk);
}

TEST(Callbacks, HandlersCompletionsAndPostedWorkMayOwnMoveOnlyThings) {
  RankPair pair;
  std::vector<int> seen;
  Message kept;
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kData,
                                    [owned = std::make_unique<int>(7), &kept](Message& m) {
                                      EXPECT_EQ(*owned, 7);
                                      kept = std::move(m);
                                    })
                  .ok());
  bool sent = false;
  pair.run(
      [&](Engine& e) {
        auto token = std::make_unique<int>(42);
        SendCallback done = [token = std::move(token), &sent](absl::Status s) { sent = s.ok() && *token == 42; };
        ASSERT_EQ(e.peer(1)->send_copy(kData, {}, bytes_of(1), std::move(done)), Result::kOk);
        drive(e, [&] { return sent; });
      },
      [&](Engine& e) {
        drive(e, [&] { return kept.valid(); });
        // A closure that owns a Message: posted from another thread, run on the engine's.
        bool released = false;
        std::thread other([&] {
          e.post([m = std::move(kept), &released]() mutable {
            m.release();
            released = true;
          });
        });
        other.join();
        drive(e, [&] { return released; });
      });
  EXPECT_TRUE(sent);
}

TEST(Rpc, CallCopyFreesTheRequestBufferAtOnce) {
  RankPair pair;
  constexpr HandlerId kCrc = 8;
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kCrc,
                                    [](Message& m) {
                                      std::uint32_t crc = testing_support::crc32c(m.payload());
                                      EXPECT_EQ(m.reply_copy({}, bytes_of(crc)), Result::kOk);
                                    })
                  .ok());
  std::vector<std::byte> request = testing_support::pattern(std::size_t{1} << 20, 3);  // above the eager limit
  const std::uint32_t sent_crc = testing_support::crc32c(request);
  std::uint32_t replied_crc = 0;
  bool done = false;
  std::atomic<bool> stop{false};
  std::thread server([&] { pair.engine(1).run_until([&] { return stop.load(); }, Clock::now() + kLong); });
  Engine& e = pair.engine(0);
  ASSERT_EQ(e.peer(1)->call_copy(kCrc, request, {},
                                 [&](absl::Status s, Message& reply) {
                                   EXPECT_TRUE(s.ok()) << s;
                                   if (s.ok()) std::memcpy(&replied_crc, reply.payload().data(), sizeof(replied_crc));
                                   done = true;
                                 }),
            Result::kOk);
  std::fill(request.begin(), request.end(), std::byte{0xEE});  // ours again at once
  drive(e, [&] { return done; });
  stop = true;
  server.join();
  EXPECT_EQ(replied_crc, sent_crc) << "the server saw the bytes as they were when call_copy returned";
}

TEST(ClientServer, AConnectWithATimeoutOfItsOwnEndsWhenTheServerNeverAnswers) {
  // A TCP listener that never speaks: the kernel completes the connection, nothing more comes.
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  auto ctx = Context::create();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto eng = (*ctx)->create_engine();
  ASSERT_TRUE(eng.ok()) << eng.status();
  std::string where = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  auto start = Clock::now();
  auto peer = (*eng)->connect(where, std::chrono::milliseconds(300));
  auto took = Clock::now() - start;
  ::close(fd);
  ASSERT_FALSE(peer.ok());
  EXPECT_EQ(peer.status().code(), absl::StatusCode::kDeadlineExceeded) << peer.status();
  EXPECT_THAT(std::string(peer.status().message()), HasSubstr("connect()'s timeout of 300ms"));
  EXPECT_LT(took, std::chrono::seconds(5)) << "its own limit, not SLUICE_CONNECT_TIMEOUT's";
}

TEST(Barrier, ThreeRanksLeaveTogetherWithEverythingSentBeforeDelivered) {
  constexpr int kRanks = 3, kRounds = 20, kEach = 50;
  auto boots = make_in_process_group(kRanks);
  std::unique_ptr<Context> ctx[kRanks];
  std::unique_ptr<Engine> eng[kRanks];
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      ContextOptions o;
      o.bootstrap = std::move(boots[r]);
      auto c = Context::create(std::move(o));
      if (!c.ok()) return (void)++failures;
      ctx[r] = std::move(*c);
      auto e = ctx[r]->create_engine();
      if (!e.ok()) return (void)++failures;
      eng[r] = std::move(*e);
      Engine& me = *eng[r];
      int received = 0;
      std::vector<std::byte> big(std::size_t{256} << 10);  // a rendezvous among the small ones
      (void)me.register_handler(kData, [&](Message&) { ++received; });
      for (int round = 1; round <= kRounds; ++round) {
        for (int to = 0; to < kRanks; ++to) {
          if (to == r) continue;
          for (int i = 0; i < kEach; ++i) {
            std::span<const std::byte> payload = i == kEach / 2 ? std::span<const std::byte>(big) : bytes_of(i);
            Result sent = Result::kWouldBlock;
            me.run_until([&] { return (sent = me.peer(to)->send_copy(kData, payload)) != Result::kWouldBlock; },
                         Clock::now() + kLong);
            if (sent != Result::kOk) ++failures;
          }
        }
        absl::Status s = me.barrier(Clock::now() + kLong);
        if (!s.ok()) ADD_FAILURE() << "rank " << r << ": " << s;
        // Everything the others sent before entering this barrier is in (and perhaps some of
        // the next round's, from a rank that left first).
        if (received < round * kEach * (kRanks - 1)) {
          ADD_FAILURE() << "rank " << r << " round " << round << ": " << received << " received";
          ++failures;
        }
      }
      // The last barrier: no rank closes while another still waits for its word.
      if (!me.barrier(Clock::now() + kLong).ok()) ++failures;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  std::vector<std::thread> closers;
  for (int r = 0; r < kRanks; ++r) closers.emplace_back([&, r] { eng[r].reset(); });
  for (auto& t : closers) t.join();
}

TEST(Barrier, ARankThatLeavesTheJobFailsTheBarrierInsteadOfHangingIt) {
  RankPair pair;
  pair.close(1);  // rank 1 is gone before it ever enters
  Engine& e = pair.engine(0);
  absl::Status s = e.barrier(Clock::now() + std::chrono::seconds(30));
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("barrier 1"));
}

}  // namespace
}  // namespace sluice
