// RPC between two engines: replies, replies into the caller's buffer, asynchronous replies,
// deadlines, cancellation racing completion, RPC windows, throwing handlers, unknown methods.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sluice/context.h>
#include <sluice/testing.h>

#include "testing/payload.h"
#include "testing/ranks.h"

namespace sluice {
namespace {

using testing_support::bytes_of;
using testing_support::crc32c;
using testing_support::pattern;
using testing_support::RankPair;

constexpr HandlerId kEcho = 20, kSlow = 21, kThrow = 22, kBig = 23;
const auto kLong = std::chrono::seconds(60);

// Rank 1 serves until rank 0 says it is done (a flag shared through the test).
struct Server {
  std::atomic<bool> stop{false};
  void serve(Engine& e) {
    e.run_until([&] { return stop.load(); }, Clock::now() + kLong);
  }
};

TEST(Rpc, EchoAndErrors) {
  RankPair pair;
  Server server;
  Engine& s = pair.engine(1);
  ASSERT_TRUE(s.register_handler(kEcho, [](Message& m) {
                 EXPECT_EQ(m.reply_copy(m.header(), m.payload()), Result::kOk);
               }).ok());
  ASSERT_TRUE(s.register_handler(kThrow, [](Message&) { throw std::runtime_error("disk on fire"); }).ok());
  pair.run(
      [&](Engine& e) {
        int done = 0;
        std::string text = "hello";
        ASSERT_EQ(e.peer(1)->call(kEcho, bytes_of(7), std::as_bytes(std::span(text)), {},
                                  [&](absl::Status st, Message& r) {
                                    ASSERT_TRUE(st.ok()) << st;
                                    EXPECT_EQ(std::string(reinterpret_cast<const char*>(r.payload().data()),
                                                          r.payload().size()),
                                              "hello");
                                    int h;
                                    std::memcpy(&h, r.header().data(), sizeof(h));
                                    EXPECT_EQ(h, 7);
                                    ++done;
                                  }),
                  Result::kOk);
        ASSERT_EQ(e.peer(1)->call(kThrow, {}, {}, {},
                                  [&](absl::Status st, Message& r) {
                                    EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
                                    EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("disk on fire"));
                                    EXPECT_FALSE(r.valid());
                                    ++done;
                                  }),
                  Result::kOk);
        ASSERT_EQ(e.peer(1)->call(999, {}, {}, {},
                                  [&](absl::Status st, Message&) {
                                    EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented);
                                    ++done;
                                  }),
                  Result::kOk);
        // The server goes on after the throw.
        ASSERT_EQ(e.peer(1)->call(kEcho, {}, {}, {},
                                  [&](absl::Status st, Message&) {
                                    EXPECT_TRUE(st.ok());
                                    ++done;
                                  }),
                  Result::kOk);
        ASSERT_TRUE(e.run_until([&] { return done == 4; }, Clock::now() + kLong));
        server.stop = true;
      },
      [&](Engine& e) { server.serve(e); });
  EXPECT_EQ(pair.engine(1).stats().value("am.handler_errors"), 1u);
}

TEST(Rpc, SmallCallsAroundTheCompactHeaderLimitRoundTripIntactAndInline) {
  // A request or reply without a reply buffer takes the 20-byte compact header when it fits
  // UCX's 92-byte immediate send: 72 bytes of user header and payload. Every size around
  // that, one call at a time, comes back byte for byte; exactly the requests and replies that
  // fit left inline.
  constexpr std::size_t kRoom = 92 - 20;
  RankPair pair;
  Server server;
  ASSERT_TRUE(
      pair.engine(1)
          .register_handler(kEcho, [](Message& m) { EXPECT_EQ(m.reply_copy(m.header(), m.payload()), Result::kOk); })
          .ok());
  std::size_t fitting = 0, calls = 0;
  pair.run(
      [&](Engine& e) {
        bool warm = false;  // the handshake first
        ASSERT_EQ(e.peer(1)->call(kEcho, {}, {}, {}, [&](absl::Status st, Message&) { warm = st.ok(); }), Result::kOk);
        ASSERT_TRUE(e.run_until([&] { return warm; }, Clock::now() + kLong));
        std::uint64_t seed = 1;
        for (std::size_t uh : {std::size_t{0}, std::size_t{3}}) {
          for (std::size_t size = 0; size <= kRoom + 4; ++size) {
            auto header = pattern(uh, seed++);
            auto payload = pattern(size, seed++);
            std::uint64_t before = e.stats().value("am.sent_inline");
            bool back = false;
            ASSERT_EQ(
                e.peer(1)->call(
                    kEcho, header, payload, {},
                    [&](absl::Status st, Message& r) {
                      ASSERT_TRUE(st.ok()) << st;
                      EXPECT_EQ(r.handler(), kEcho);  // a compact reply does not carry it; the call knows
                      EXPECT_TRUE(std::equal(r.header().begin(), r.header().end(), header.begin(), header.end()))
                          << "user header " << uh << ", payload " << size;
                      EXPECT_TRUE(std::equal(r.payload().begin(), r.payload().end(), payload.begin(), payload.end()))
                          << "user header " << uh << ", payload " << size;
                      back = true;
                    }),
                Result::kOk);
            bool fits = uh + size <= kRoom;
            EXPECT_EQ(e.stats().value("am.sent_inline"), before + (fits ? 1 : 0))
                << "request: user header " << uh << ", payload " << size;
            ASSERT_TRUE(e.run_until([&] { return back; }, Clock::now() + kLong));
            fitting += fits;
            ++calls;
          }
        }
        server.stop = true;
      },
      [&](Engine& e) { server.serve(e); });
  // The replies: the warm-up call's, and one per fitting call, left inline; no other did.
  EXPECT_EQ(pair.engine(1).stats().value("am.sent_inline"), 1 + fitting);
  EXPECT_EQ(pair.engine(1).stats().value("rpc.replies"), 1 + calls);
}

TEST(Rpc, ReplyLandsInTheCallersBuffer) {
  RankPair pair;
  Server server;
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kBig,
                                    [](Message& m) {
                                      std::uint64_t n;
                                      std::memcpy(&n, m.header().data(), sizeof(n));
                                      auto data = pattern(n, n);
                                      EXPECT_EQ(m.reply_copy({}, data), Result::kOk);
                                    })
                  .ok());
  pair.run(
      [&](Engine& e) {
        for (std::uint64_t n : {std::uint64_t{0}, std::uint64_t{16}, std::uint64_t{8192}, std::uint64_t{8193},
                                std::uint64_t{1} << 20, std::uint64_t{9} << 20}) {
          std::vector<std::byte> buf(std::size_t{9} << 20);
          bool done = false;
          CallOptions o;
          o.reply_buffer = buf;
          ASSERT_EQ(e.peer(1)->call(
                        kBig, bytes_of(n), {}, o,
                        [&](absl::Status st, Message& r) {
                          ASSERT_TRUE(st.ok()) << st << " n=" << n;
                          EXPECT_EQ(r.payload().size(), n);
                          EXPECT_EQ(static_cast<const void*>(r.payload().data()), static_cast<const void*>(buf.data()))
                              << "landed in place";
                          EXPECT_EQ(crc32c(r.payload()), crc32c(pattern(n, n)));
                          done = true;
                        }),
                    Result::kOk);
          ASSERT_TRUE(e.run_until([&] { return done; }, Clock::now() + kLong)) << n;
        }
        // A reply larger than the buffer is refused, not truncated.
        std::vector<std::byte> small(100);
        std::uint64_t n = 101;
        bool done = false;
        CallOptions o;
        o.reply_buffer = small;
        ASSERT_EQ(e.peer(1)->call(kBig, bytes_of(n), {}, o,
                                  [&](absl::Status st, Message&) {
                                    EXPECT_EQ(st.code(), absl::StatusCode::kOutOfRange) << st;
                                    done = true;
                                  }),
                  Result::kOk);
        ASSERT_TRUE(e.run_until([&] { return done; }, Clock::now() + kLong));
        EXPECT_EQ(testing::posted_exact_receives(e), 0u);
        server.stop = true;
      },
      [&](Engine& e) { server.serve(e); });
}

TEST(Rpc, AsynchronousReplyFromAnotherThreadThroughPost) {
  RankPair pair;
  Server server;
  std::vector<std::thread> workers;
  Engine& s = pair.engine(1);
  ASSERT_TRUE(s.register_handler(kSlow, [&](Message& m) {
                 auto held = std::make_shared<Message>(std::move(m));
                 workers.emplace_back([&s, held] {
                   std::this_thread::sleep_for(std::chrono::milliseconds(50));
                   s.post([held] { EXPECT_EQ(held->reply_copy({}, held->payload()), Result::kOk); });
                 });
               }).ok());
  pair.run(
      [&](Engine& e) {
        int done = 0;
        for (int i = 0; i < 10; ++i) {
          ASSERT_EQ(e.peer(1)->call(kSlow, {}, bytes_of(i), {},
                                    [&, i](absl::Status st, Message& r) {
                                      ASSERT_TRUE(st.ok()) << st;
                                      int v;
                                      std::memcpy(&v, r.payload().data(), sizeof(v));
                                      EXPECT_EQ(v, i);
                                      ++done;
                                    }),
                    Result::kOk);
        }
        ASSERT_TRUE(e.run_until([&] { return done == 10; }, Clock::now() + kLong));
        server.stop = true;
      },
      [&](Engine& e) { server.serve(e); });
  for (auto& t : workers) t.join();
}

TEST(Rpc, DeadlinePassesAndTheLateReplyIsDiscarded) {
  RankPair pair;
  Server server;
  std::vector<Message> parked;
  ASSERT_TRUE(pair.engine(1).register_handler(kSlow, [&](Message& m) { parked.push_back(std::move(m)); }).ok());
  std::atomic<bool> expired{false};
  pair.run(
      [&](Engine& e) {
        bool done = false;
        auto t0 = Clock::now();
        CallOptions o;
        o.timeout = std::chrono::milliseconds(100);
        ASSERT_EQ(e.peer(1)->call(kSlow, {}, {}, o,
                                  [&](absl::Status st, Message&) {
                                    EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded);
                                    done = true;
                                  }),
                  Result::kOk);
        ASSERT_TRUE(e.run_until([&] { return done; }, Clock::now() + kLong));
        EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(100));
        expired = true;
        ASSERT_TRUE(e.run_until([&] { return e.stats().value("rpc.late_replies") == 1; }, Clock::now() + kLong));
        server.stop = true;
      },
      [&](Engine& e) {
        e.run_until([&] { return expired.load(); }, Clock::now() + kLong);
        for (auto& m : parked) EXPECT_EQ(m.reply_copy({}, {}), Result::kOk);
        parked.clear();
        server.serve(e);
      });
}

TEST(Rpc, CancellationRacingCompletionCompletesExactlyOnce) {
  RankPair pair;
  Server server;
  ASSERT_TRUE(pair.engine(1).register_handler(kEcho, [](Message& m) { (void)m.reply_copy({}, m.payload()); }).ok());
  pair.run(
      [&](Engine& e) {
        std::mt19937 rng(4242);
        std::printf("seed 4242\n");
        constexpr int kIters = 10000;
        std::vector<int> completions(kIters);
        std::vector<std::byte> buf(64);
        int finished = 0, cancelled = 0;
        for (int i = 0; i < kIters; ++i) {
          CallId id = 0;
          CallOptions o;
          if (i % 2) o.reply_buffer = buf;
          Result r;
          while ((r = e.peer(1)->call(
                      kEcho, {}, bytes_of(i), o,
                      [&, i](absl::Status st, Message&) {
                        ++completions[static_cast<std::size_t>(i)];
                        ++finished;
                        cancelled += st.code() == absl::StatusCode::kCancelled;
                      },
                      &id)) == Result::kWouldBlock) {
            e.progress();
          }
          ASSERT_EQ(r, Result::kOk);
          // Cancel at once, after a random number of progress calls, or after the reply came (so
          // that both outcomes occur whatever the machine's load).
          switch (rng() % 4) {
            case 0: break;
            case 1:
              e.run_until([&] { return completions[static_cast<std::size_t>(i)] > 0; }, Clock::now() + kLong);
              break;
            default:
              for (int k = 0, spins = static_cast<int>(rng() % 40); k < spins; ++k) e.progress();
          }
          e.cancel(id);
          if (rng() % 3 == 0) e.cancel(id);  // twice: still one completion
          if (i % 2) {
            // The caller's buffer is reused only after the completion.
            e.run_until([&] { return completions[static_cast<std::size_t>(i)] > 0; }, Clock::now() + kLong);
          }
        }
        ASSERT_TRUE(e.run_until([&] { return finished == kIters; }, Clock::now() + kLong));
        e.run_until([] { return false; }, Clock::now() + std::chrono::milliseconds(200));
        for (int i = 0; i < kIters; ++i) ASSERT_EQ(completions[static_cast<std::size_t>(i)], 1) << i;
        EXPECT_GT(cancelled, 0);
        EXPECT_LT(cancelled, kIters);
        EXPECT_EQ(testing::posted_exact_receives(e), 0u);
        server.stop = true;
      },
      [&](Engine& e) { server.serve(e); });
}

TEST(Rpc, TheWindowWithASlowServerNeverOverflows) {
  Config c;
  c.rpc_window = 2;
  RankPair pair(c);
  Server server;
  std::vector<Message> parked;
  std::size_t most = 0;
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kSlow,
                                    [&](Message& m) {
                                      parked.push_back(std::move(m));
                                      most = std::max(most, parked.size());
                                    })
                  .ok());
  pair.run(
      [&](Engine& e) {
        int ok = 0, other = 0;
        for (int i = 0; i < 50; ++i) {
          ASSERT_EQ(e.peer(1)->call(kSlow, {}, bytes_of(i), {},
                                    [&](absl::Status st, Message&) {
                                      if (st.ok()) ++ok;
                                      else ++other;
                                    }),
                    Result::kOk);
        }
        ASSERT_TRUE(e.run_until([&] { return ok + other == 50; }, Clock::now() + kLong));
        EXPECT_EQ(ok, 50);
        EXPECT_EQ(other, 0) << "no call refused for the window";
        server.stop = true;
      },
      [&](Engine& e) {
        e.run_until(
            [&] {
              // Reply slowly, one at a time, a little after each arrives.
              if (!parked.empty()) {
                std::this_thread::sleep_for(std::chrono::milliseconds(2));
                EXPECT_EQ(parked.front().reply_copy({}, {}), Result::kOk);
                parked.erase(parked.begin());
              }
              return server.stop.load();
            },
            Clock::now() + kLong);
      });
  EXPECT_LE(most, 2u);
  EXPECT_EQ(pair.engine(1).stats().value("rpc.window_refused"), 0u);
}

TEST(Rpc, ACallerWithinItsWindowIsNeverRefusedWhileRepliesAreStillInFlight) {
  // The NFSv4.1 backchannel failure: the caller has its reply and sends the next request
  // before the server has seen that reply's send complete. Over TCP, 4 x the window in calls
  // with 256 KiB replies (rendezvous, straight into the callers' buffers) issued at once: the
  // server used to refuse some (rpc.window_refused), holding each place until the completion.
  for (const char* tls : {"tcp", ""}) {
    SCOPED_TRACE(tls);
    Config c;
    c.tls = tls;
    c.rpc_window = 4;
    RankPair pair(c);
    Server server;
    std::vector<std::byte> block = pattern(256 << 10, 7);
    ASSERT_TRUE(pair.engine(1)
                    .register_handler(kBig, [&](Message& m) { EXPECT_EQ(m.reply_copy({}, block), Result::kOk); })
                    .ok());
    constexpr int kCalls = 16;
    std::vector<std::vector<std::byte>> into(kCalls, std::vector<std::byte>(block.size()));
    pair.run(
        [&](Engine& e) {
          int ok = 0, other = 0;
          for (int round = 0; round < 20; ++round) {
            for (int i = 0; i < kCalls; ++i) {
              CallOptions o;
              o.reply_buffer = into[static_cast<std::size_t>(i)];
              ASSERT_EQ(e.peer(1)->call(kBig, {}, {}, o,
                                        [&, i](absl::Status st, Message& r) {
                                          if (st.ok() && r.payload().size() == block.size() &&
                                              std::memcmp(r.payload().data(), block.data(), block.size()) == 0) {
                                            ++ok;
                                          } else {
                                            ++other;
                                            ADD_FAILURE() << "call " << i << ": " << st;
                                          }
                                        }),
                        Result::kOk);
            }
            ASSERT_TRUE(e.run_until([&] { return ok + other == (round + 1) * kCalls; }, Clock::now() + kLong));
          }
          EXPECT_EQ(other, 0);
          server.stop = true;
        },
        [&](Engine& e) { server.serve(e); });
    EXPECT_EQ(pair.engine(1).stats().value("rpc.window_refused"), 0u);
  }
}

TEST(Rpc, ReplyGoesOutWhenOneWaySendsHaveUsedUpTheSendPool) {
  // The server's one-way sends to a client that holds their credits fill its send pool; a
  // reply still finds a send slot, out of the 2·S held back for replies (rpc.md).
  Config c;
  c.send_pool_max = 256 << 10;
  c.pool_chunk = 64 << 10;
  c.credits = 4;
  c.credits_max = 4;  // no loans: the credits let through stay 4
  c.rpc_window = 4;
  c.send_queue_max = 1000;
  RankPair pair(c);
  constexpr HandlerId kFlood = 24;
  std::vector<Message> kept;
  bool keep = true;
  int flood_seen = 0;
  ASSERT_TRUE(pair.engine(0)
                  .register_handler(kFlood,
                                    [&](Message& m) {
                                      ++flood_seen;
                                      if (keep) kept.push_back(std::move(m));
                                    })
                  .ok());
  std::atomic<bool> server_full{false}, replied{false}, stop{false};
  std::atomic<Result> reply_result{Result::kInvalidArgument};
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kEcho,
                                    [&](Message& m) {
                                      reply_result.store(m.reply_copy(m.header(), m.payload()));
                                      replied = true;
                                    })
                  .ok());
  int sent = 0;
  pair.run(
      [&](Engine& e) {
        ASSERT_TRUE(e.run_until([&] { return server_full.load(); }, Clock::now() + kLong));
        std::string text = "still answered";
        bool done = false;
        absl::Status status;
        std::string echoed;
        ASSERT_EQ(e.peer(1)->call(kEcho, {}, std::as_bytes(std::span(text)), {},
                                  [&](absl::Status st, Message& r) {
                                    status = st;
                                    if (st.ok())
                                      echoed.assign(reinterpret_cast<const char*>(r.payload().data()),
                                                    r.payload().size());
                                    done = true;
                                  }),
                  Result::kOk);
        ASSERT_TRUE(e.run_until([&] { return replied.load(); }, Clock::now() + kLong));
        keep = false;
        kept.clear();  // credits go back: the queued sends and then the reply flow
        ASSERT_TRUE(e.run_until([&] { return done; }, Clock::now() + kLong));
        EXPECT_TRUE(status.ok()) << status;
        EXPECT_EQ(echoed, text);
        ASSERT_TRUE(e.run_until([&] { return flood_seen == sent; }, Clock::now() + kLong));
        stop = true;
      },
      [&](Engine& e) {
        std::vector<std::byte> small(100);
        // Send until the pool has stayed full for 200 ms: the slots of sends that complete (those
        // the client's credits let through) are taken again, the rest wait in the queue.
        Result r = Result::kOk;
        auto last_ok = Clock::now();
        while (Clock::now() - last_ok < std::chrono::milliseconds(200)) {
          r = e.peer(0)->send_copy(kFlood, {}, small);
          if (r == Result::kOk) {
            ++sent;
            last_ok = Clock::now();
          }
          e.progress();
        }
        EXPECT_EQ(r, Result::kWouldBlock);
        PoolStats ps = e.pool_stats(Direction::kSend);
        // Queued small sends share a slot, up to half the grant each (coalescing at enqueue).
        std::size_t per_slot = std::max<std::size_t>(1, c.credits / 2);
        EXPECT_GE((ps.classes[0].slots_total - ps.classes[0].slots_free) * per_slot,
                  static_cast<std::size_t>(sent) - c.credits)
            << "the queued sends (all but those the credits let through) hold the send pool";
        EXPECT_LT(sent, 1000) << "the pool ran out, not the send queue";
        server_full = true;
        e.run_until([&] { return stop.load(); }, Clock::now() + kLong);
      });
  EXPECT_EQ(reply_result.load(), Result::kOk);
}

// Calls `method` with its header the size n, for each n of `sizes`, once into a reply buffer
// and once without, and checks that every reply is pattern(n, n), landed in place when it had
// a buffer. Counts the calls in `calls`.
void expect_pattern_replies(Engine& e, HandlerId method, const std::vector<std::uint64_t>& sizes,
                            int* calls = nullptr) {
  std::vector<std::byte> buf(std::size_t{9} << 20);
  for (std::uint64_t n : sizes) {
    for (bool into_buffer : {true, false}) {
      bool done = false;
      CallOptions o;
      if (into_buffer) o.reply_buffer = buf;
      ASSERT_EQ(e.peer(1)->call(
                    method, bytes_of(n), {}, o,
                    [&](absl::Status st, Message& r) {
                      ASSERT_TRUE(st.ok()) << st << " n=" << n;
                      EXPECT_EQ(r.payload().size(), n);
                      if (into_buffer) {
                        EXPECT_EQ(static_cast<const void*>(r.payload().data()), static_cast<const void*>(buf.data()))
                            << "landed in place, n=" << n;
                      }
                      EXPECT_EQ(crc32c(r.payload()), crc32c(pattern(n, n)))
                          << "n=" << n << (into_buffer ? " into the reply buffer" : "");
                      done = true;
                    }),
                Result::kOk);
      if (calls != nullptr) ++*calls;
      ASSERT_TRUE(e.run_until([&] { return done; }, Clock::now() + kLong)) << n;
    }
  }
}

std::uint64_t size_in_header(const Message& m) {
  std::uint64_t n;
  std::memcpy(&n, m.header().data(), sizeof(n));
  return n;
}

// Zero-copy replies (message.h): from the application's memory and from a registered send
// slot, eager and rendezvous, into a reply buffer and not; nothing is copied (am.copied_bytes
// stays 0), every completion runs once; a copying reply of the same size is counted.
TEST(Rpc, ZeroCopyRepliesAreNotCopiedAndCompleteOnce) {
  RankPair pair;
  Server server;
  constexpr HandlerId kZero = 25, kFromSlot = 26, kCopy = 27;
  const std::vector<std::uint64_t> sizes = {16, 8192, 8193, std::uint64_t{1} << 20, std::uint64_t{9} << 20};
  std::map<std::uint64_t, std::vector<std::byte>> store;  // the server's data, alive throughout
  for (auto n : sizes) store[n] = pattern(n, n);
  std::atomic<int> completions{0}, failed{0};  // the server thread counts, the client waits
  auto done_cb = [&](absl::Status st) {
    ++completions;
    failed += !st.ok();
  };
  Engine& s = pair.engine(1);
  ASSERT_TRUE(s.register_handler(kZero, [&](Message& m) {
                 EXPECT_EQ(m.reply({}, store[size_in_header(m)], done_cb), Result::kOk);
               }).ok());
  ASSERT_TRUE(s.register_handler(kFromSlot, [&](Message& m) {
                 std::uint64_t n = size_in_header(m);
                 auto slot = std::make_shared<Slot>();
                 ASSERT_EQ(s.try_get_send_slot(n, slot.get()), Result::kOk);
                 std::memcpy(slot->data(), store[n].data(), n);
                 EXPECT_EQ(m.reply({}, *slot, n, [&, slot](absl::Status st) { done_cb(st); }), Result::kOk);
               }).ok());
  ASSERT_TRUE(s.register_handler(kCopy, [&](Message& m) {
                 std::vector<std::byte> temporary = store[std::uint64_t{1} << 20];
                 EXPECT_EQ(m.reply_copy({}, temporary), Result::kOk);  // free to go once it returns
               }).ok());
  int calls = 0;
  pair.run(
      [&](Engine& e) {
        expect_pattern_replies(e, kZero, sizes, &calls);
        expect_pattern_replies(e, kFromSlot, {16, 8192, 8193, std::uint64_t{1} << 20}, &calls);  // within 4 MiB
        ASSERT_TRUE(e.run_until([&] { return completions == calls; }, Clock::now() + kLong));
        server.stop = true;
      },
      [&](Engine& e) {
        server.serve(e);
        EXPECT_EQ(e.stats().value("am.copied_bytes"), 0u) << "no zero-copy reply was copied";
      });
  EXPECT_EQ(completions, calls);
  EXPECT_EQ(failed, 0);
  // The copying variant, for comparison: counted.
  Server again;
  pair.run(
      [&](Engine& e) {
        bool done = false;
        ASSERT_EQ(e.peer(1)->call(kCopy, {}, {}, {},
                                  [&](absl::Status st, Message& r) {
                                    EXPECT_TRUE(st.ok()) << st;
                                    EXPECT_EQ(crc32c(r.payload()), crc32c(store[std::uint64_t{1} << 20]));
                                    done = true;
                                  }),
                  Result::kOk);
        ASSERT_TRUE(e.run_until([&] { return done; }, Clock::now() + kLong));
        again.stop = true;
      },
      [&](Engine& e) { again.serve(e); });
  EXPECT_EQ(pair.engine(1).stats().value("am.copied_bytes"), std::uint64_t{1} << 20);
}

// reply_copy takes its bytes before it returns: the handler overwrites its buffer (kept
// alive) at once, and the caller still gets the original, at every size (inline, eager,
// rendezvous from a send slot, from the heap above the largest class).
TEST(Rpc, ReplyCopyLeavesTheBufferFreeWhenItReturns) {
  RankPair pair;
  Server server;
  constexpr HandlerId kCopy = 30;
  std::vector<std::byte> scratch;  // the handler's one buffer, reused by every reply
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kCopy,
                                    [&](Message& m) {
                                      std::uint64_t n = size_in_header(m);
                                      scratch = pattern(n, n);
                                      EXPECT_EQ(m.reply_copy({}, scratch), Result::kOk);
                                      std::fill(scratch.begin(), scratch.end(), std::byte{0xEE});
                                    })
                  .ok());
  const std::vector<std::uint64_t> sizes = {16, 8192, 8193, std::uint64_t{1} << 20, std::uint64_t{9} << 20};
  pair.run(
      [&](Engine& e) {
        expect_pattern_replies(e, kCopy, sizes);
        server.stop = true;
      },
      [&](Engine& e) { server.serve(e); });
}

// reply() (and its Slot form) sends from the handler's memory and runs on_done only once
// that memory is free: on_done overwrites it and frees it, and the caller still gets the
// original; on_done runs exactly once per reply.
TEST(Rpc, ZeroCopyReplyRunsOnDoneOnceItsBufferIsFree) {
  RankPair pair;
  Server server;
  constexpr HandlerId kZero = 31, kFromSlot = 32;
  std::atomic<int> replies{0}, completions{0}, failed{0};  // the server thread counts, the client waits
  auto finish = [&](std::span<std::byte> memory, absl::Status st) {
    std::fill(memory.begin(), memory.end(), std::byte{0xEE});
    ++completions;
    failed += !st.ok();
  };
  Engine& s = pair.engine(1);
  ASSERT_TRUE(s.register_handler(kZero, [&](Message& m) {
                 std::uint64_t n = size_in_header(m);
                 auto memory = std::make_shared<std::vector<std::byte>>(pattern(n, n));
                 auto once = std::make_shared<bool>(false);
                 ++replies;
                 EXPECT_EQ(m.reply({}, *memory,
                                   [&, memory, once](absl::Status st) {
                                     EXPECT_FALSE(std::exchange(*once, true)) << "on_done ran twice";
                                     finish(*memory, st);
                                   }),
                           Result::kOk);
               }).ok());
  ASSERT_TRUE(s.register_handler(kFromSlot, [&](Message& m) {
                 std::uint64_t n = size_in_header(m);
                 auto slot = std::make_shared<Slot>();
                 ASSERT_EQ(s.try_get_send_slot(n, slot.get()), Result::kOk);
                 auto bytes = pattern(n, n);
                 std::memcpy(slot->data(), bytes.data(), n);
                 ++replies;
                 EXPECT_EQ(m.reply({}, *slot, n,
                                   [&, slot, n](absl::Status st) {
                                     finish(std::span(slot->data(), n), st);
                                     slot->release();  // back to the pool: the next reply may take it
                                   }),
                           Result::kOk);
               }).ok());
  pair.run(
      [&](Engine& e) {
        expect_pattern_replies(e, kZero, {16, 8192, 8193, std::uint64_t{1} << 20, std::uint64_t{9} << 20});
        expect_pattern_replies(e, kFromSlot, {16, 8193, std::uint64_t{1} << 20, std::uint64_t{4} << 20});
        ASSERT_TRUE(e.run_until([&] { return completions == replies; }, Clock::now() + kLong));
        server.stop = true;
      },
      [&](Engine& e) { server.serve(e); });
  EXPECT_EQ(completions, replies);
  EXPECT_EQ(failed, 0);
}

// A reply from the request's own payload, changed in place (read-modify-write): not copied
// at any size, the request's memory held until the reply's send completes, then its credit back.
TEST(Rpc, ReplyFromTheRequestsOwnPayloadIsNotCopied) {
  RankPair pair;
  Server server;
  constexpr HandlerId kBump = 29;
  std::atomic<int> completions{0}, failed{0};  // the server thread counts, the client waits
  std::vector<Result> results;
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kBump,
                                    [&](Message& m) {
                                      for (std::byte& b : m.payload())
                                        b = static_cast<std::byte>(static_cast<unsigned>(b) + 1);
                                      results.push_back(m.reply_with_payload(m.header(), [&](absl::Status st) {
                                        ++completions;
                                        failed += !st.ok();
                                      }));
                                      EXPECT_FALSE(m.valid()) << "the request went with its reply";
                                    })
                  .ok());
  const std::vector<std::size_t> sizes = {0, 16, 8192, 8193, std::size_t{1} << 20, std::size_t{9} << 20};
  pair.run(
      [&](Engine& e) {
        std::vector<std::byte> buf(std::size_t{9} << 20);
        for (bool into_buffer : {true, false}) {
          for (std::size_t n : sizes) {
            auto data = pattern(n, n + 1);
            auto want = data;
            for (std::byte& b : want) b = static_cast<std::byte>(static_cast<unsigned>(b) + 1);
            bool done = false;
            CallOptions o;
            if (into_buffer) o.reply_buffer = buf;
            ASSERT_EQ(e.peer(1)->call(kBump, bytes_of(n), data, o,
                                      [&](absl::Status st, Message& r) {
                                        ASSERT_TRUE(st.ok()) << st << " n=" << n;
                                        EXPECT_EQ(r.header().size(), sizeof(std::size_t));
                                        EXPECT_EQ(crc32c(r.payload()), crc32c(want)) << n;
                                        done = true;
                                      }),
                      Result::kOk);
            ASSERT_TRUE(e.run_until([&] { return done; }, Clock::now() + kLong)) << n;
          }
        }
        ASSERT_TRUE(
            e.run_until([&] { return completions == 2 * static_cast<int>(sizes.size()); }, Clock::now() + kLong));
        server.stop = true;
      },
      [&](Engine& e) {
        server.serve(e);
        EXPECT_EQ(e.stats().value("am.copied_bytes"), 0u);
        PoolStats rs = e.pool_stats(Direction::kRecv);
        for (std::size_t k = 1; k < rs.classes.size(); ++k)
          EXPECT_EQ(rs.classes[k].slots_free, rs.classes[k].slots_total) << "every request's landing slot came back";
      });
  EXPECT_EQ(results, std::vector<Result>(2 * sizes.size(), Result::kOk));
  EXPECT_EQ(failed, 0);
}

// kEcho answers with the request's own payload.
absl::Status echo_own_payload(Engine& e) {
  return e.register_handler(kEcho, [](Message& m) { EXPECT_EQ(m.reply_with_payload({}), Result::kOk); });
}

// Keeps `window` of `total` calls in flight until all have finished: start(i, done) issues
// call i, whose callback calls done().
void windowed_calls(Engine& e, int total, int window, const std::function<void(int, std::function<void()>)>& start) {
  int issued = 0, finished = 0;
  while (finished < total) {
    while (issued < total && issued - finished < window) start(issued++, [&finished] { ++finished; });
    int seen = finished;
    ASSERT_TRUE(e.run_until([&] { return finished > seen; }, Clock::now() + kLong));
  }
}

// A caller keeping as many calls in flight as it has credits (and the server's window) never waits
// for a credit: a small request's reply carries the request's own credit, and a large request's
// credit goes back once its payload has landed, not after its reply has been sent. (A small
// request answered into a reply buffer is not among them: its reply's payload is sent from the
// request's receive slot, whose credit goes back when that send completes, one reply later.)
TEST(Rpc, AFullWindowOfCallsNeverWaitsForCredits) {
  Config config;
  config.credits = 16;
  config.rpc_window = 16;
  RankPair pair(config);
  Server server;
  ASSERT_TRUE(echo_own_payload(pair.engine(1)).ok());
  pair.run(
      [&](Engine& e) {
        for (std::size_t n : {std::size_t{8}, std::size_t{64} << 10}) {
          for (bool into_buffer : {false, true}) {
            if (n == 8 && into_buffer) continue;
            auto data = pattern(n, 7);
            std::vector<std::vector<std::byte>> buffers(config.credits, std::vector<std::byte>(n));
            std::vector<int> free_buffers;
            for (int k = 0; k < static_cast<int>(config.credits); ++k) free_buffers.push_back(k);
            int bad = 0;
            // The first full window also completes the handshake; stalls are counted after it.
            std::uint64_t stalls_before = 0;
            windowed_calls(e, 1000, static_cast<int>(config.credits), [&](int i, std::function<void()> done) {
              if (i == static_cast<int>(config.credits)) stalls_before = e.stats().value("flow.credit_stalls");
              CallOptions o;
              int k = free_buffers.back();
              free_buffers.pop_back();
              if (into_buffer) o.reply_buffer = buffers[k];
              ASSERT_EQ(e.peer(1)->call(kEcho, {}, data, o,
                                        [&, k, done](absl::Status st, Message& r) {
                                          bad += !st.ok() || r.payload().size() != n;
                                          free_buffers.push_back(k);
                                          done();
                                        }),
                        Result::kOk);
            });
            EXPECT_EQ(bad, 0);
            EXPECT_EQ(e.stats().value("flow.credit_stalls") - stalls_before, 0u)
                << n << " bytes, reply buffer " << into_buffer;
          }
        }
        server.stop = true;
      },
      [&](Engine& e) { server.serve(e); });
}

// More small calls in flight than the server's window: those that wait for room leave
// inline when one frees, like the others (no transport request and completion each), intact
// and answered once.
TEST(Rpc, CallsBeyondTheServersWindowLeaveInlineWhenItHasRoom) {
  Config config;
  config.rpc_window = 8;
  RankPair pair(config);
  Server server;
  ASSERT_TRUE(echo_own_payload(pair.engine(1)).ok());
  pair.run(
      [&](Engine& e) {
        const int total = 2000, window = 32;
        int bad = 0;
        // One call first: the handshake's messages are not inline sends.
        bool first = false;
        ASSERT_EQ(e.peer(1)->call(kEcho, {}, bytes_of(-1), {}, [&](absl::Status st, Message&) { first = st.ok(); }),
                  Result::kOk);
        ASSERT_TRUE(e.run_until([&] { return first; }, Clock::now() + kLong));
        std::uint64_t inline_before = e.stats().value("am.sent_inline"), sent_before = e.stats().value("am.msgs_sent");
        windowed_calls(e, total, window, [&](int i, std::function<void()> done) {
          ASSERT_EQ(e.peer(1)->call(kEcho, {}, bytes_of(i), {},
                                    [&, i, done](absl::Status st, Message& r) {
                                      int v = -1;
                                      if (r.payload().size() == sizeof(v))
                                        std::memcpy(&v, r.payload().data(), sizeof(v));
                                      bad += !st.ok() || v != i;
                                      done();
                                    }),
                    Result::kOk);
        });
        EXPECT_EQ(bad, 0);
        std::uint64_t sent = e.stats().value("am.msgs_sent") - sent_before;
        EXPECT_GE(sent, static_cast<std::uint64_t>(total));
        EXPECT_EQ(e.stats().value("am.sent_inline") - inline_before, sent) << "every request left inline";
        server.stop = true;
      },
      [&](Engine& e) { server.serve(e); });
}

// Bounce mode cannot announce a reply buffer with a request cut into pieces: refused at once,
// not answered OUT_OF_RANGE later.
TEST(Rpc, BounceModeRefusesALargeRequestWithAReplyBuffer) {
  Config c;
  c.rndv = false;
  RankPair pair(c);
  pair.run(
      [&](Engine& e) {
        std::vector<std::byte> request(64 << 10), reply(64 << 10);
        CallOptions o;
        o.reply_buffer = reply;
        EXPECT_EQ(e.peer(1)->call(kEcho, {}, request, o, [](absl::Status, Message&) { ADD_FAILURE(); }),
                  Result::kInvalidArgument);
        EXPECT_EQ(e.stats().value("rpc.calls"), 0u);
      },
      [](Engine&) {});
}

// A copying reply never answers kWouldBlock: from a 2 MiB send pool whose 1 MiB class cannot grow, eight
// 1 MiB replies at once all go (the rest are copied to the heap) and arrive intact.
TEST(Rpc, CopyingRepliesNeverWouldBlockWhenTheSendPoolIsExhausted) {
  Config c;
  c.send_pool_max = 2 << 20;
  c.pool_chunk = 1 << 20;
  RankPair pair(c);
  Server server;
  constexpr HandlerId kCopy = 28;
  const auto data = pattern(std::size_t{1} << 20, 77);
  std::vector<Result> results;
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kCopy,
                                    [&](Message& m) {
                                      std::vector<std::byte> temporary = data;
                                      results.push_back(m.reply_copy({}, temporary));
                                    })
                  .ok());
  constexpr int kCalls = 8;
  pair.run(
      [&](Engine& e) {
        std::vector<std::vector<std::byte>> bufs(kCalls, std::vector<std::byte>(data.size()));
        int done = 0, good = 0;
        for (int i = 0; i < kCalls; ++i) {
          CallOptions o;
          o.reply_buffer = bufs[static_cast<std::size_t>(i)];
          ASSERT_EQ(e.peer(1)->call(kCopy, {}, {}, o,
                                    [&](absl::Status st, Message& r) {
                                      EXPECT_TRUE(st.ok()) << st;
                                      good += st.ok() && crc32c(r.payload()) == crc32c(data);
                                      ++done;
                                    }),
                    Result::kOk);
        }
        ASSERT_TRUE(e.run_until([&] { return done == kCalls; }, Clock::now() + kLong));
        EXPECT_EQ(good, kCalls);
        server.stop = true;
      },
      [&](Engine& e) { server.serve(e); });
  EXPECT_EQ(results, std::vector<Result>(kCalls, Result::kOk)) << "reply_copy never answered kWouldBlock";
  EXPECT_EQ(pair.engine(1).stats().value("am.copied_bytes"), kCalls * data.size());
}

}  // namespace
}  // namespace sluice
