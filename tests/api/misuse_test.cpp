// The mistakes a hurried user makes, each with its documented outcome: a clear status, one log
// line that says what and why, no crash, nothing lost, nothing leaked (run under ASan and TSan
// by scripts/sanitize).
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sluice/context.h>
#include <sluice/testing.h>

#include "testing/payload.h"
#include "testing/ranks.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
using testing_support::bytes_of;
using testing_support::RankPair;

constexpr HandlerId kData = 5, kKeep = 6, kEcho = 7;
const auto kLong = std::chrono::seconds(60);

// Occurrences of `what` in `text`.
int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// Drives `e` on this thread until `done()`; fails the test on a minute's wait.
void drive(Engine& e, const std::function<bool()>& done) { ASSERT_TRUE(e.run_until(done, Clock::now() + kLong)); }

double thread_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

TEST(Threads, ASendFromAThreadThatDoesNotDriveTheEngineIsRefusedAndLoggedOnce) {
  RankPair pair;
  int received = 0;
  ASSERT_TRUE(pair.engine(1).register_handler(kData, [&](Message&) { ++received; }).ok());
  std::atomic<bool> receiver_done{false};
  std::thread receiver([&] {
    // Until the one send that may leave has arrived, then a while longer: a refused send that
    // left anyway would arrive in that time.
    Engine& r = pair.engine(1);
    r.run_until([&] { return received >= 1; }, Clock::now() + kLong);
    r.run_until([] { return false; }, Clock::now() + std::chrono::milliseconds(200));
    receiver_done = true;
  });
  Engine& e = pair.engine(0);
  Peer* peer = e.peer(1);
  ASSERT_NE(peer, nullptr);
  ASSERT_EQ(peer->send_copy(kData, {}, bytes_of(1)), Result::kOk);
  e.progress();  // this thread drives the engine from now on
  ::testing::internal::CaptureStderr();
  constexpr int kTries = 500;
  std::atomic<int> refused{0};
  std::atomic<bool> worker_done{false};
  std::thread worker([&] {
    for (int i = 0; i < kTries; ++i)
      if (peer->send_copy(kData, {}, bytes_of(i)) == Result::kInvalidArgument) ++refused;
    worker_done = true;
  });
  drive(e, [&] { return worker_done.load(); });
  worker.join();
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(refused.load(), kTries);
  EXPECT_EQ(count_of(log, "Peer::send_copy called on thread"), 1) << log;
  EXPECT_THAT(log, HasSubstr("Engine::release_thread()"));
  EXPECT_EQ(e.stats().value("api.wrong_thread"), static_cast<std::uint64_t>(kTries));
  // The engine's own sends were not disturbed: the first arrives, the refused ones never left.
  drive(e, [&] { return receiver_done.load(); });
  receiver.join();
  EXPECT_EQ(received, 1);
  EXPECT_EQ(e.stats().value("am.msgs_sent"), 1u);
}

TEST(Threads, ProgressFromASecondThreadIsRefusedUntilTheEngineIsHandedOver) {
  RankPair pair;
  std::atomic<int> received{0};
  ASSERT_TRUE(pair.engine(1).register_handler(kData, [&](Message&) { ++received; }).ok());
  std::atomic<bool> stop{false};
  std::thread receiver([&] { pair.engine(1).run_until([&] { return stop.load(); }, Clock::now() + kLong); });
  Engine& e = pair.engine(0);
  ASSERT_EQ(e.peer(1)->send_copy(kData, {}, bytes_of(1)), Result::kOk);
  drive(e, [&] { return received == 1; });
  ::testing::internal::CaptureStderr();
  bool progressed = true;
  std::thread second([&] { progressed = e.progress(); });
  second.join();
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(progressed);
  EXPECT_THAT(log, HasSubstr("Engine::progress called on thread"));
  // Still this thread's: it sends and progresses as before.
  ASSERT_EQ(e.peer(1)->send_copy(kData, {}, bytes_of(2)), Result::kOk);
  drive(e, [&] { return received == 2; });
  // Handed over explicitly, the engine works from the new thread, and no longer from this one.
  e.release_thread();
  Result sent = Result::kInvalidArgument;
  std::thread next([&] {
    sent = e.peer(1)->send_copy(kData, {}, bytes_of(3));
    e.run_until([&] { return received == 3; }, Clock::now() + kLong);
  });
  next.join();
  EXPECT_EQ(sent, Result::kOk);
  EXPECT_EQ(received.load(), 3);
  // The new thread drives it now: a lookup still finds the peer, whose send is refused.
  ASSERT_NE(e.peer(1), nullptr);
  EXPECT_EQ(e.peer(1)->send_copy(kData, {}, bytes_of(4)), Result::kInvalidArgument);
  std::thread back([&] { e.release_thread(); });
  back.join();
  EXPECT_EQ(e.peer(1)->send_copy(kData, {}, bytes_of(4)), Result::kOk);
  drive(e, [&] { return received == 4; });
  stop = true;
  receiver.join();
}

TEST(Lifetime, MessagesKeptPastTheirEngineAreInvalidAndSafeToDestroy) {
  RankPair pair;
  std::vector<Message> kept;
  ASSERT_TRUE(pair.engine(1).register_handler(kKeep, [&](Message& m) { kept.push_back(std::move(m)); }).ok());
  std::vector<std::byte> large(256 << 10, std::byte{7});  // lands by rendezvous in a slot of its own
  pair.run(
      [&](Engine& e) {
        int done = 0;
        for (int i = 0; i < 9; ++i)
          ASSERT_EQ(e.peer(1)->send_copy(kKeep, bytes_of(i), bytes_of(i), [&](absl::Status) { ++done; }), Result::kOk);
        ASSERT_EQ(e.peer(1)->send(kKeep, {}, large, [&](absl::Status) { ++done; }), Result::kOk);
        drive(e, [&] { return done == 10; });
      },
      [&](Engine& e) { drive(e, [&] { return kept.size() == 10; }); });
  for (const Message& m : kept) ASSERT_TRUE(m.valid());
  // Rank 0 keeps answering the close while rank 1's engine goes, messages still held.
  pair.engine(0).release_thread();
  std::atomic<bool> stop{false};
  std::thread other([&] { pair.engine(0).run_until([&] { return stop.load(); }, Clock::now() + kLong); });
  ::testing::internal::CaptureStderr();
  pair.close(1);
  std::string log = ::testing::internal::GetCapturedStderr();
  stop = true;
  other.join();
  EXPECT_THAT(log, HasSubstr("still holds 10 received Message(s)")) << log;
  for (Message& m : kept) {
    EXPECT_FALSE(m.valid());
    EXPECT_TRUE(m.payload().empty());
    EXPECT_TRUE(m.header().empty());
    EXPECT_EQ(m.peer(), nullptr);
    EXPECT_EQ(m.reply_copy({}, {}), Result::kInvalidArgument);
  }
  kept.erase(kept.begin(), kept.begin() + 5);                                     // destroyed here, on this thread
  std::thread elsewhere([moved = std::move(kept)]() mutable { moved.clear(); });  // and there
  elsewhere.join();
}

TEST(Lifetime, SendSlotsKeptPastTheirEngineAreEmptyAndSafeToDestroy) {
  std::vector<Slot> kept(6);
  ::testing::internal::CaptureStderr();
  {
    auto ctx =
        Context::create(ContextOptions{.config = Config(), .bootstrap = std::move(make_in_process_group(1).front())});
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    auto engine = (*ctx)->create_engine();
    ASSERT_TRUE(engine.ok()) << engine.status();
    for (Slot& s : kept) {
      ASSERT_EQ((*engine)->try_get_send_slot(4096, &s), Result::kOk);
      ASSERT_NE(s.data(), nullptr);
      ASSERT_GE(s.size(), 4096u);
      std::memset(s.data(), 1, 4096);
    }
    Slot given_back;
    ASSERT_EQ((*engine)->try_get_send_slot(4096, &given_back), Result::kOk);  // released in time: not counted
  }
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(log, HasSubstr("send pool class send.eager destroyed with 6 slots still held")) << log;
  for (const Slot& s : kept) {
    EXPECT_TRUE(s) << "still owns its descriptor";
    EXPECT_EQ(s.data(), nullptr);
    EXPECT_EQ(s.size(), 0u);
    EXPECT_EQ(testing::memh(s), nullptr);
  }
  kept.erase(kept.begin(), kept.begin() + 3);                                     // destroyed here, on this thread
  std::thread elsewhere([moved = std::move(kept)]() mutable { moved.clear(); });  // and there: the last frees all
  elsewhere.join();
}

TEST(Close, CallsWaitingForRepliesEndAtOnceWhenTheEngineCloses) {
  Config c;
  c.rpc_window = 32;
  RankPair pair(c);
  std::vector<Message> unanswered;
  ASSERT_TRUE(pair.engine(1).register_handler(kKeep, [&](Message& m) { unanswered.push_back(std::move(m)); }).ok());
  std::atomic<bool> stop{false};
  std::thread server([&] { pair.engine(1).run_until([&] { return stop.load(); }, Clock::now() + kLong); });
  constexpr int kCalls = 100;  // 32 reach the server, 68 wait for room in its window
  int cancelled = 0, other = 0;
  Engine& e = pair.engine(0);
  for (int i = 0; i < kCalls; ++i)
    ASSERT_EQ(e.peer(1)->call(kKeep, {}, bytes_of(i), {},
                              [&](absl::Status s, Message&) { (absl::IsCancelled(s) ? cancelled : other)++; }),
              Result::kOk);
  drive(e, [&] { return testing::outstanding_sends(e) == 0; });
  auto start = Clock::now();
  pair.close(0);
  auto took = Clock::now() - start;
  EXPECT_EQ(cancelled, kCalls);
  EXPECT_EQ(other, 0);
  EXPECT_LT(took, std::chrono::seconds(2)) << "the close waited for replies that were not coming";
  stop = true;
  server.join();
  unanswered.clear();
}

TEST(Close, WhileSendsWaitToDrainTheCloseSleepsInsteadOfSpinning) {
  Config c;
  c.credits = 2;
  c.rx_posted = 2;
  c.connect_timeout = std::chrono::seconds(1);  // bounds the close
  RankPair pair(c);
  ASSERT_TRUE(pair.engine(1).register_handler(kData, [](Message&) {}).ok());
  Engine& e = pair.engine(0);
  int handshaken = 0;
  ASSERT_EQ(e.peer(1)->send_copy(kData, {}, bytes_of(0), [&](absl::Status) { ++handshaken; }), Result::kOk);
  std::thread once([&] {
    pair.engine(1).run_until([&] { return false; }, Clock::now() + std::chrono::milliseconds(300));
    pair.engine(1).release_thread();
  });
  drive(e, [&] { return handshaken == 1; });
  once.join();
  // Rank 1 no longer progresses: rank 0's queued sends wait for credits that do not come.
  for (int i = 0; i < 20; ++i) ASSERT_EQ(e.peer(1)->send_copy(kData, {}, bytes_of(i)), Result::kOk);
  double cpu = thread_cpu_seconds();
  auto start = Clock::now();
  pair.close(0);
  double wall = std::chrono::duration<double>(Clock::now() - start).count();
  cpu = thread_cpu_seconds() - cpu;
  EXPECT_GE(wall, 0.9) << "the close waited for the sends until its deadline";
  EXPECT_LT(cpu, wall / 2) << "the close spun: " << cpu << " s of CPU in " << wall << " s";
}

TEST(Rpc, ACallOutstandingLongerThanCallWarnIsLoggedOnceAndGoesOn) {
  Config c;
  c.call_warn = std::chrono::milliseconds(200);
  RankPair pair(c);
  std::vector<Message> held;
  ASSERT_TRUE(pair.engine(1).register_handler(kKeep, [&](Message& m) { held.push_back(std::move(m)); }).ok());
  absl::Status got = absl::UnknownError("not yet");
  ::testing::internal::CaptureStderr();
  pair.run(
      [&](Engine& e) {
        ASSERT_EQ(e.peer(1)->call(kKeep, {}, bytes_of(1), {}, [&](absl::Status s, Message&) { got = s; }), Result::kOk);
        e.run_until([] { return false; }, Clock::now() + std::chrono::milliseconds(700));
        EXPECT_EQ(e.stats().value("rpc.overdue"), 1u);
        drive(e, [&] { return got.ok(); });
      },
      [&](Engine& e) {
        drive(e, [&] { return held.size() == 1; });
        e.run_until([] { return false; }, Clock::now() + std::chrono::milliseconds(900));
        EXPECT_EQ(held[0].reply_copy({}, {}), Result::kOk);
        drive(e, [&] { return testing::outstanding_sends(e) == 0; });
      });
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_of(log, "has waited"), 1) << log;
  EXPECT_THAT(log, HasSubstr("method 6 to rank 1"));
  EXPECT_TRUE(got.ok()) << got;
}

// Both sides say so, once: the receiver that holds the messages, and the sender whose messages
// wait for the credits they hold.
TEST(Flow, APeerWhoseCreditsTheApplicationHoldsIsLoggedOnBothSidesAndCounted) {
  Config c;
  c.credits = 4;
  c.rx_posted = 4;
  c.heartbeat = std::chrono::milliseconds(100);
  RankPair pair(c);
  std::vector<Message> kept;
  ASSERT_TRUE(pair.engine(1).register_handler(kKeep, [&](Message& m) { kept.push_back(std::move(m)); }).ok());
  constexpr std::size_t kCount = 10;
  std::uint64_t held_while = 0, held_after = 0;
  std::atomic<bool> all_in{false};
  ::testing::internal::CaptureStderr();
  pair.run(
      [&](Engine& e) {
        for (std::size_t i = 0; i < kCount; ++i) ASSERT_EQ(e.peer(1)->send_copy(kKeep, {}, bytes_of(i)), Result::kOk);
        drive(e, [&] { return all_in.load(); });
      },
      [&](Engine& e) {
        drive(e, [&] { return kept.size() == 4; });
        e.run_until([] { return false; }, Clock::now() + std::chrono::milliseconds(500));
        held_while = e.stats().value("flow.peers_held");
        EXPECT_EQ(kept.size(), 4u) << "the sender waits for credits";
        std::size_t total = 0;
        while (true) {
          total += kept.size();
          kept.clear();  // released: their credits go back
          if (total >= kCount) break;
          drive(e, [&] { return !kept.empty(); });
        }
        held_after = e.stats().value("flow.peers_held");
        all_in = true;
      });
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_of(log, "cannot send: all 4 of its credits are held by 4 of its messages"), 1) << log;
  EXPECT_THAT(log, HasSubstr("rank 0 cannot send"));
  EXPECT_EQ(count_of(log, "rank 1 holds the credits it granted us (4 of 4 spent, for "), 1) << log;
  EXPECT_THAT(log, HasSubstr("6 of our messages wait in its send queue"));
  EXPECT_EQ(held_while, 1u);
  EXPECT_EQ(held_after, 0u);
}

TEST(Flow, WhatAPeerSendsAfterItWasDeclaredDeadIsDroppedAndCounted) {
  Config c;
  c.peer_timeout = std::chrono::milliseconds(500);
  c.heartbeat = std::chrono::milliseconds(100);
  RankPair pair(c);
  int received = 0;
  ASSERT_TRUE(pair.engine(0).register_handler(kData, [&](Message&) { ++received; }).ok());
  pair.run([&](Engine& e) { drive(e, [&] { return received == 1; }); },
           [&](Engine& e) {
             bool done = false;
             ASSERT_EQ(e.peer(0)->send_copy(kData, {}, bytes_of(0), [&](absl::Status) { done = true; }), Result::kOk);
             drive(e, [&] { return done; });
           });
  // Rank 1 stops (nothing drives it), rank 0 declares it dead, and goes on for longer than the
  // few seconds in which a dead peer's last messages usually arrive.
  Engine& e0 = pair.engine(0);
  drive(e0, [&] { return !e0.peer(1)->alive(); });
  e0.run_until([] { return false; }, Clock::now() + std::chrono::milliseconds(5500));
  std::uint64_t dropped_before = e0.stats().value("am.dropped");
  // Rank 1 resumes and sends, unaware.
  constexpr int kLate = 5;
  std::atomic<bool> sent{false};
  std::thread resumed([&] {
    Engine& e1 = pair.engine(1);
    for (int i = 0; i < kLate; ++i) EXPECT_EQ(e1.peer(0)->send_copy(kData, {}, bytes_of(i)), Result::kOk);
    e1.run_until([&] { return testing::outstanding_sends(e1) == 0; }, Clock::now() + kLong);
    sent = true;
    e1.run_until([] { return false; }, Clock::now() + std::chrono::milliseconds(300));
  });
  drive(e0, [&] { return sent && e0.stats().value("am.dropped") >= dropped_before + kLate; });
  resumed.join();
  EXPECT_EQ(received, 1) << "nothing of a dead peer is delivered";
  EXPECT_GE(e0.stats().value("am.dropped"), dropped_before + kLate);
}

TEST(Api, SendsAndCallsWithoutAUserHeaderAndAFullSendPoolIsWouldBlock) {
  Config c;
  c.send_pool_max = 2 << 20;
  c.pool_chunk = 1 << 20;
  c.pool_classes = {64 << 10};
  RankPair pair(c);
  int plain = 0, echoed = 0;
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kData,
                                    [&](Message& m) {
                                      EXPECT_TRUE(m.header().empty());
                                      EXPECT_EQ(m.payload().size(), sizeof(int));
                                      ++plain;
                                    })
                  .ok());
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kEcho, [](Message& m) { EXPECT_EQ(m.reply_copy({}, m.payload()), Result::kOk); })
                  .ok());
  std::atomic<bool> done{false};
  pair.run(
      [&](Engine& e) {
        Peer* p = e.peer(1);
        int one = 1, completions = 0;
        ASSERT_EQ(p->send(kData, bytes_of(one)), Result::kOk);
        ASSERT_EQ(p->send(kData, bytes_of(one), [&](absl::Status s) { completions += s.ok(); }), Result::kOk);
        ASSERT_EQ(p->send_copy(kData, bytes_of(one)), Result::kOk);
        ASSERT_EQ(p->send_copy(kData, bytes_of(one), [&](absl::Status s) { completions += s.ok(); }), Result::kOk);
        ASSERT_EQ(p->call(kEcho, bytes_of(one), {},
                          [&](absl::Status s, Message& r) {
                            EXPECT_TRUE(s.ok()) << s;
                            echoed = static_cast<int>(r.payload().size());
                          }),
                  Result::kOk);
        drive(e, [&] { return completions == 2 && echoed == sizeof(int); });
        // The 64 KiB class holds what 1 MiB chunks within 2 MiB allow; then the pool is full
        // for now, not for ever: a slot given back makes room again.
        std::vector<Slot> held;
        Result r = Result::kOk;
        while (held.size() < 100 && (r = e.try_get_send_slot(40 << 10, &held.emplace_back())) == Result::kOk) {}
        EXPECT_EQ(r, Result::kWouldBlock);
        held.pop_back();
        held.pop_back();
        Slot again;
        EXPECT_EQ(e.try_get_send_slot(40 << 10, &again), Result::kOk);
        EXPECT_EQ(e.try_get_send_slot(std::size_t{1} << 30, &again), Result::kInvalidArgument);
        done = true;
      },
      [&](Engine& e) { drive(e, [&] { return done.load(); }); });
  EXPECT_EQ(plain, 4);
}

TEST(Errors, EveryInvalidArgumentSaysWhy) {
  RankPair pair;
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kEcho,
                                    [](Message& m) {
                                      EXPECT_EQ(m.reply_copy({}, m.payload()), Result::kOk);
                                      EXPECT_EQ(m.reply_copy({}, m.payload()), Result::kInvalidArgument);
                                      EXPECT_EQ(m.reply_error(absl::OkStatus()), Result::kInvalidArgument);
                                    })
                  .ok());
  ASSERT_TRUE(
      pair.engine(1)
          .register_handler(kData, [](Message& m) { EXPECT_EQ(m.reply_copy({}, {}), Result::kInvalidArgument); })
          .ok());
  std::uint64_t invalid0 = 0, invalid1 = 0;
  std::atomic<bool> done{false};
  ::testing::internal::CaptureStderr();
  pair.run(
      [&](Engine& e) {
        std::vector<std::byte> big_header(kMaxUserHeader + 1);
        EXPECT_EQ(e.peer(1)->send(kData, big_header, {}), Result::kInvalidArgument);
        EXPECT_EQ(e.peer(1)->call(kEcho, {}, {}, {}, nullptr), Result::kInvalidArgument);
        Slot none;
        EXPECT_EQ(e.peer(1)->send(kData, {}, none, 8), Result::kInvalidArgument);
        Message empty;
        EXPECT_EQ(empty.reply_copy({}, {}), Result::kInvalidArgument);
        bool answered = false;
        ASSERT_EQ(e.peer(1)->call(kEcho, {}, bytes_of(1), {}, [&](absl::Status, Message&) { answered = true; }),
                  Result::kOk);
        ASSERT_EQ(e.peer(1)->send_copy(kData, {}, bytes_of(2)), Result::kOk);
        drive(e, [&] { return answered; });
        invalid0 = e.stats().value("api.invalid_argument");
        done = true;
      },
      [&](Engine& e) {
        drive(e, [&] { return done.load(); });
        invalid1 = e.stats().value("api.invalid_argument");
      });
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(invalid0, 3u);
  EXPECT_EQ(invalid1, 3u);
  EXPECT_THAT(log, HasSubstr("header of 1025 bytes (at most 1024)"));
  EXPECT_THAT(log, HasSubstr("no reply callback"));
  EXPECT_THAT(log, HasSubstr("the Slot is empty"));
  EXPECT_THAT(log, HasSubstr("empty, released or moved-from Message"));
  EXPECT_THAT(log, HasSubstr("it was answered already"));
  EXPECT_THAT(log, HasSubstr("the status is OK"));
  EXPECT_THAT(log, HasSubstr("it is not a request"));
}

TEST(Errors, ErrorRepliesNameWhatTheyAreAbout) {
  RankPair pair;
  ASSERT_TRUE(pair.engine(1).register_handler(kKeep, [](Message&) {}).ok());  // releases unanswered
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kEcho,
                                    [](Message& m) {
                                      std::vector<std::byte> big(100);
                                      EXPECT_EQ(m.reply_copy({}, big), Result::kOk);
                                    })
                  .ok());
  std::vector<absl::Status> got;
  std::atomic<bool> done{false};
  pair.run(
      [&](Engine& e) {
        auto keep = [&](absl::Status s, Message&) { got.push_back(s); };
        ASSERT_EQ(e.peer(1)->call(77, {}, {}, {}, keep), Result::kOk);
        ASSERT_EQ(e.peer(1)->call(kKeep, {}, {}, {}, keep), Result::kOk);
        std::vector<std::byte> buffer(10);
        CallOptions small;
        small.reply_buffer = buffer;
        ASSERT_EQ(e.peer(1)->call(kEcho, {}, {}, small, keep), Result::kOk);
        drive(e, [&] { return got.size() == 3; });
        done = true;
      },
      [&](Engine& e) { drive(e, [&] { return done.load(); }); });
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(got[0].message()), HasSubstr("no method 77 is registered"));
  EXPECT_EQ(got[1].code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(got[1].message()), HasSubstr("released the request without a reply"));
  EXPECT_EQ(got[2].code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(got[2].message()), HasSubstr("100-byte payload does not fit the call's 10-byte"));
}

}  // namespace
}  // namespace sluice
