// Wake-ups over UCX's shared memory between real engines (client/server mode, one process):
// clients that slept once (in their connect) and from then on only poll leave nothing behind
// that keeps the server from waking the next client that sleeps. Each wake-up UCX sends is a
// datagram charged to the server's socket until its receiver reads it; unread, a few hundred
// of them fill the socket's buffer, and UCX drops every later wake-up (docs/architecture.md,
// "Threading and progress").
#include <sys/resource.h>

#include <atomic>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <sluice/context.h>

#include "testing/ranks.h"

namespace sluice {
namespace {

constexpr HandlerId kLater = 7;

// How many wake-up datagrams fill a socket's default send buffer (net.core.wmem_default, each
// charged about 768 bytes here), with a margin.
int enough_to_fill_a_send_buffer() {
  long wmem = 212992;
  if (FILE* f = std::fopen("/proc/sys/net/core/wmem_default", "r")) {
    if (std::fscanf(f, "%ld", &wmem) != 1) wmem = 212992;
    std::fclose(f);
  }
  return static_cast<int>(wmem / 768) + 64;
}

TEST(Wakeups, ClientsThatPollWithoutSleepingDoNotKeepTheServerFromWakingASleepingClient) {
  const int idle_count = enough_to_fill_a_send_buffer();
  rlimit files{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  files.rlim_cur = files.rlim_max;  // a dozen descriptors per engine
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &files), 0);
  if (files.rlim_cur < static_cast<rlim_t>(16 * idle_count)) GTEST_SKIP() << "too few file descriptors allowed";
  Config c = *Config::from_env();
  c.cs_transport = CsTransport::kAuto;           // UCX over shared memory: the same host
  c.connect_timeout = std::chrono::seconds(60);  // connects whose wake-ups are dropped end, slowly
  c.spin = Duration::zero();  // every wait sleeps; and no thread spins beside the connects on a busy machine
  testing_support::SingleEngine server(c);
  auto port = server.engine->listen("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  const std::string address = "127.0.0.1:" + std::to_string(*port);
  // The server answers a call 100 ms after it came, so that its caller is asleep by then.
  std::optional<Message> held;
  Clock::time_point held_since{};
  ASSERT_TRUE(server.engine
                  ->register_handler(kLater,
                                     [&](Message& m) {
                                       held.emplace(std::move(m));
                                       held_since = Clock::now();
                                     })
                  .ok());
  std::atomic<bool> stop{false};
  server.engine->release_thread();
  std::thread serving([&] {
    while (!stop) {
      server.engine->run_until(
          [&] { return stop.load() || (held && Clock::now() - held_since >= std::chrono::milliseconds(100)); },
          Clock::now() + std::chrono::seconds(1));
      if (held && Clock::now() - held_since >= std::chrono::milliseconds(100)) {
        EXPECT_EQ(held->reply_copy({}, held->payload()), Result::kOk);
        held.reset();
      }
    }
    server.engine->release_thread();
  });

  // Idle clients, as an application that polls its engines now and then: each sleeps in its
  // connect (woken by the server's HELLO), then is progressed every 100 ms and never sleeps.
  Config small = c;
  small.pool_chunk = 64 << 10;  // hundreds of clients: small pools
  auto ctx = Context::create(ContextOptions{.config = small, .bootstrap = std::move(make_in_process_group(1).front())});
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  std::atomic<int> connected{0};
  std::atomic<bool> idle_stop{false};
  std::thread idling([&] {
    std::vector<std::unique_ptr<Engine>> idle;
    for (int i = 0; i < idle_count && !idle_stop; ++i) {
      auto e = (*ctx)->create_engine();
      auto p = e.ok() ? (*e)->connect(address) : absl::StatusOr<Peer*>(e.status());
      EXPECT_TRUE(p.ok()) << "idle client " << i << ": " << p.status();
      if (!p.ok()) break;
      idle.push_back(std::move(*e));
      ++connected;
    }
    connected = idle_count;  // (or gave up)
    while (!idle_stop) {
      for (auto& e : idle) e->progress();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    idle.clear();  // closed while the server answers their goodbyes
  });
  while (connected < idle_count) std::this_thread::sleep_for(std::chrono::milliseconds(10));

  // A client that calls and sleeps until the answer comes: woken by it, not by its own timer.
  auto caller = (*ctx)->create_engine();
  ASSERT_TRUE(caller.ok()) << caller.status();
  auto peer = (*caller)->connect(address);
  ASSERT_TRUE(peer.ok()) << peer.status();
  int answered = 0;
  for (int i = 0; i < 5; ++i) {
    std::uint32_t v = i;
    ASSERT_EQ((*peer)->call(kLater, {}, std::as_bytes(std::span(&v, 1)), {},
                            [&](absl::Status s, Message&) {
                              EXPECT_TRUE(s.ok()) << s;
                              ++answered;
                            }),
              Result::kOk);
    ASSERT_TRUE((*caller)->run_until([&] { return answered == i + 1; }, Clock::now() + std::chrono::seconds(30)));
  }
  std::uint64_t missed = (*caller)->stats().value("am.wakeups_missed");
  // Closed while the server answers their goodbyes.
  caller->reset();
  idle_stop = true;
  idling.join();
  stop = true;
  serving.join();
  EXPECT_EQ(missed, 0u) << "the caller slept through answers that were there (its wake-ups were dropped)";
}

}  // namespace
}  // namespace sluice
