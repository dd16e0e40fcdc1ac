// Two engines in one process (two ranks of an in-process group), over the real UCX transports.
#include <sys/resource.h>
#include <atomic>
#include <cstring>
#include <ctime>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sluice/context.h>

#include "testing/ranks.h"

namespace sluice {
namespace {

using testing_support::bytes_of;
using testing_support::RankPair;

TEST(TwoEngines, EagerMessagesArriveInOrderWithIntactBytes) {
  RankPair pair;
  constexpr int kCount = 20000;
  std::vector<int> got;
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(7,
                                    [&](Message& m) {
                                      int v;
                                      ASSERT_EQ(m.payload().size(), sizeof(v));
                                      std::memcpy(&v, m.payload().data(), sizeof(v));
                                      got.push_back(v);
                                    })
                  .ok());
  int completed = 0;
  pair.run(
      [&](Engine& e) {
        Peer* p = e.peer(1);
        for (int i = 0; i < kCount;) {
          Result r = p->send(7, {}, bytes_of(i), [&](absl::Status s) {
            EXPECT_TRUE(s.ok()) << s;
            ++completed;
          });
          if (r == Result::kWouldBlock) {
            e.progress();
            continue;
          }
          ASSERT_EQ(r, Result::kOk);
          ++i;
        }
        e.run_until([&] { return completed == kCount; }, Clock::now() + std::chrono::seconds(30));
      },
      [&](Engine& e) { e.run_until([&] { return got.size() == kCount; }, Clock::now() + std::chrono::seconds(30)); });
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kCount));
  for (int i = 0; i < kCount; ++i) ASSERT_EQ(got[static_cast<std::size_t>(i)], i);
  EXPECT_EQ(completed, kCount);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The calling thread's voluntary context switches: each time it slept. Unlike its CPU share,
// which other processes on the machine lower, this counts only what the thread chose to do.
long thread_sleeps() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_nvcsw;
}

TEST(TwoEngines, AnIdleEngineSleepsInWaitAndPostWakesIt) {
  Config c;
  c.peer_timeout = kInfinite;  // no heartbeats: nothing to wake for but the post
  RankPair pair(c);
  Engine& e = pair.engine(0);
  std::atomic<bool> ran{false};
  Clock::time_point posted_at, ran_at;
  // Posted 300 ms into a wait whose poll would otherwise sleep up to 1 s.
  std::thread poster([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    posted_at = Clock::now();
    e.post([&] {
      ran_at = Clock::now();
      ran = true;
    });
  });
  double cpu0 = thread_cpu_seconds();
  auto t0 = Clock::now();
  while (!ran && Clock::now() - t0 < std::chrono::seconds(10)) e.wait(Clock::now() + std::chrono::seconds(5));
  double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  double cpu = thread_cpu_seconds() - cpu0;
  poster.join();
  ASSERT_TRUE(ran.load());
  EXPECT_LT(std::chrono::duration<double>(ran_at - posted_at).count(), 0.15) << "post() woke the sleeping engine";
  EXPECT_LT(cpu, 0.25 * waited) << "an idle engine sleeps instead of spinning";
}

struct Woken {
  double after;      // seconds from the post to run_until's return
  double cpu_share;  // of the thread, while in run_until
  long sleeps;       // voluntary context switches while in run_until
};

// Runs e.run_until(flag) on this thread while another thread sets the flag after 300 ms and
// then calls post().
Woken run_until_woken_by_post(Engine& e) {
  std::atomic<bool> flag{false};
  Clock::time_point posted_at;
  std::thread poster([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    flag = true;
    posted_at = Clock::now();
    e.post([] {});
  });
  double cpu0 = thread_cpu_seconds();
  long sleeps0 = thread_sleeps();
  auto t0 = Clock::now();
  bool ok = e.run_until([&] { return flag.load(); }, Clock::now() + std::chrono::seconds(10));
  auto t1 = Clock::now();
  long sleeps = thread_sleeps() - sleeps0;
  double cpu = thread_cpu_seconds() - cpu0;
  poster.join();
  EXPECT_TRUE(ok);
  return {std::chrono::duration<double>(t1 - posted_at).count(), cpu / std::chrono::duration<double>(t1 - t0).count(),
          sleeps};
}

TEST(TwoEngines, RunUntilSleepsWhenIdleAndPostWakesIt) {
  Config c;
  c.peer_timeout = kInfinite;  // no heartbeats: nothing to wake for but the post
  RankPair pair(c);
  Woken w = run_until_woken_by_post(pair.engine(0));
  EXPECT_LT(w.after, 0.15) << "post() woke the sleeping run_until";
  EXPECT_LT(w.cpu_share, 0.25) << "an idle run_until sleeps after SLUICE_SPIN instead of spinning";
  EXPECT_GE(w.sleeps, 1);
}

TEST(TwoEngines, RunUntilSpinsWithoutSleepingWhenSpinIsInfinite) {
  Config c;
  c.peer_timeout = kInfinite;
  c.spin = kInfinite;
  RankPair pair(c);
  Woken w = run_until_woken_by_post(pair.engine(0));
  EXPECT_LT(w.after, 0.15);
  // Counted in the thread's own sleeps, not its CPU share: a busy machine lowers the share of
  // a thread that never sleeps (to 0.15 in one loaded run).
  EXPECT_EQ(w.sleeps, 0) << "SLUICE_SPIN=inf: run_until never sleeps";
}

}  // namespace
}  // namespace sluice
