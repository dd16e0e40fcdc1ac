// Active messages between two engines (two ranks in one process, each on its own thread),
// over shared memory and over TCP, with rendezvous on and off.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
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

using testing_support::bytes_of;
using testing_support::crc32c;
using testing_support::Ledger;
using testing_support::pattern;
using testing_support::RankPair;

constexpr HandlerId kData = 3;
const auto kLong = std::chrono::seconds(60);

struct Transport {
  const char* name;
  const char* tls;
  bool rndv;
};

class Messaging : public ::testing::TestWithParam<Transport> {
 protected:
  Config config() const {
    Config c;
    c.tls = GetParam().tls;
    c.rndv = GetParam().rndv;
    return c;
  }
};

// Resident set size of this process, from /proc, read through one descriptor into a stack
// buffer: the test below samples it thousands of times, and a FILE per sample (4.5 KB freed
// each time) grew the process itself under ASan, whose quarantine keeps freed memory.
std::size_t rss_bytes() {
  static const int kStatm = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  char buf[128];
  ssize_t n = kStatm < 0 ? -1 : ::pread(kStatm, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return 0;
  buf[n] = '\0';
  char* rest = nullptr;
  (void)std::strtol(buf, &rest, 10);  // total pages; resident pages follow
  long resident = std::strtol(rest, nullptr, 10);
  return static_cast<std::size_t>(resident) * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

// Sends `payloads` to rank 1, each with a ledger header (its index, size and CRC), retrying
// after progress on kWouldBlock (counted in `would_block`), and waits for every completion.
void send_with_ledgers(Engine& e, const std::vector<std::vector<std::byte>>& payloads, bool copy,
                       int* would_block = nullptr) {
  std::size_t completed = 0;
  std::vector<Ledger> ledgers(payloads.size());
  for (std::size_t i = 0; i < payloads.size();) {
    ledgers[i] = {0, static_cast<std::uint32_t>(i), payloads[i].size(), crc32c(payloads[i])};
    auto cb = [&](absl::Status s) {
      EXPECT_TRUE(s.ok()) << s;
      ++completed;
    };
    Result r = copy ? e.peer(1)->send_copy(kData, bytes_of(ledgers[i]), payloads[i], cb)
                    : e.peer(1)->send(kData, bytes_of(ledgers[i]), payloads[i], cb);
    if (r == Result::kWouldBlock) {
      if (would_block != nullptr) ++*would_block;
      e.progress();
      continue;
    }
    ASSERT_EQ(r, Result::kOk);
    ++i;
  }
  ASSERT_TRUE(e.run_until([&] { return completed == payloads.size(); }, Clock::now() + kLong));
}

// Sends `payloads` from rank 0 to rank 1 with a ledger header; rank 1 checks every byte and
// the order, after not consuming for `receiver_pause`. Returns what rank 1 saw and, in
// `would_block`, how often a send answered kWouldBlock.
void send_and_check(RankPair& pair, const std::vector<std::vector<std::byte>>& payloads, bool copy,
                    std::vector<std::uint32_t>* order, HandlerOptions options = {},
                    std::chrono::milliseconds receiver_pause = {}, int* would_block = nullptr) {
  std::size_t bad = 0;
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(
                      kData,
                      [&](Message& m) {
                        Ledger l;
                        ASSERT_EQ(m.header().size(), sizeof(l));
                        std::memcpy(&l, m.header().data(), sizeof(l));
                        if (m.payload().size() != l.size || crc32c(m.payload()) != l.crc) ++bad;
                        order->push_back(l.seq);
                      },
                      std::move(options))
                  .ok());
  pair.run([&](Engine& e) { send_with_ledgers(e, payloads, copy, would_block); },
           [&](Engine& e) {
             std::this_thread::sleep_for(receiver_pause);
             ASSERT_TRUE(e.run_until([&] { return order->size() == payloads.size(); }, Clock::now() + kLong));
           });
  EXPECT_EQ(bad, 0u);
  ASSERT_EQ(order->size(), payloads.size());
  for (std::size_t i = 0; i < order->size(); ++i) ASSERT_EQ((*order)[i], i);
}

// Sends `payload` from e to rank 1 on handler kData, retrying while the send answers
// kWouldBlock; returns the first other answer. The retries run inside run_until: between
// attempts the engine progresses, and sleeps once idle beyond SLUICE_SPIN, so a sender
// waiting for credits leaves the core to its receiver. kWouldBlock leaves on_done with us.
Result send_when_taken(Engine& e, std::span<const std::byte> payload, SendCallback on_done) {
  Result r = Result::kWouldBlock;
  e.run_until([&] { return (r = e.peer(1)->send(kData, {}, payload, std::move(on_done))) != Result::kWouldBlock; },
              Clock::now() + kLong);
  return r;
}

// Sends the ints 0..count-1 from e to rank 1 and waits until every send has completed
// successfully.
void send_numbers(Engine& e, int count) {
  int completed = 0;
  for (int i = 0; i < count; ++i)
    ASSERT_EQ(send_when_taken(e, bytes_of(i), [&](absl::Status s) { completed += s.ok(); }), Result::kOk);
  ASSERT_TRUE(e.run_until([&] { return completed == count; }, Clock::now() + kLong));
}

TEST_P(Messaging, SizeBoundariesArriveIntactAndInOrder) {
  RankPair pair(config());
  std::size_t eager = pair.engine(0).eager_limit() - sizeof(Ledger);  // header counts too
  std::vector<std::vector<std::byte>> payloads;
  std::uint64_t seed = 1;
  for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{63}, std::size_t{64}, eager - 1, eager,
                           eager + 1, std::size_t{64} << 10, std::size_t{1} << 20, std::size_t{16} << 20,
                           std::size_t{1}, std::size_t{4} << 20, std::size_t{0}}) {
    payloads.push_back(pattern(size, seed++));
  }
  std::vector<std::uint32_t> order;
  send_and_check(pair, payloads, false, &order);
  auto sent = pair.engine(0).stats().value("am.rndv_sent");
  if (GetParam().rndv) {
    EXPECT_EQ(sent, 5u) << "every payload above the eager limit goes by rendezvous";
  } else {
    EXPECT_EQ(sent, 0u);
    EXPECT_GT(pair.engine(0).stats().value("am.bounce_copied_bytes"), 0u);
  }
}

TEST_P(Messaging, QueuedSmallMessagesTravelCoalescedIntactAndInOrder) {
  // Few credits, many small messages: the queue builds, and as credits come back it drains
  // in coalesced tagged messages. Every message still arrives intact, once, in order; with
  // SLUICE_COALESCE=n the same traffic goes one tagged message each.
  for (bool coalesce : {true, false}) {
    Config c = config();
    c.credits = 4;
    c.coalesce = coalesce;
    RankPair pair(c);
    std::vector<std::vector<std::byte>> payloads;
    for (std::uint64_t i = 0; i < 3000; ++i) payloads.push_back(pattern(i % 7 == 0 ? 900 : i % 97, i));
    payloads.push_back(pattern(std::size_t{100} << 10, 7));  // a rendezvous in between
    for (std::uint64_t i = 0; i < 500; ++i) payloads.push_back(pattern(i % 13, i));
    std::vector<std::uint32_t> order;
    send_and_check(pair, payloads, true, &order);
    std::uint64_t coalesced = pair.engine(0).stats().value("am.coalesced");
    if (coalesce) {
      EXPECT_GT(coalesced, 100u) << "queued messages rode together";
    } else {
      EXPECT_EQ(coalesced, 0u);
    }
    EXPECT_EQ(pair.engine(1).stats().value("wire.parse_errors"), 0u);
  }
}

TEST_P(Messaging, SmallMessagesLeaveInlineAndStillCompleteFromProgress) {
  // Once the handshake is done, a message of at most 92 bytes with the wire header leaves
  // inline (no pool slot, no transport operation); its completion still runs from progress(),
  // never inside send(). A larger one takes the pool path. Both arrive, in order.
  RankPair pair(config());
  std::vector<std::size_t> sizes;
  ASSERT_TRUE(pair.engine(1).register_handler(kData, [&](Message& m) { sizes.push_back(m.payload().size()); }).ok());
  std::vector<std::byte> small(8, std::byte{1}), large(200, std::byte{2});
  pair.run(
      [&](Engine& e) {
        bool done = false;
        auto cb = [&](absl::Status s) {
          EXPECT_TRUE(s.ok()) << s;
          done = true;
        };
        ASSERT_EQ(e.peer(1)->send(kData, {}, small, cb), Result::kOk);  // starts the handshake
        ASSERT_TRUE(e.run_until([&] { return done; }, Clock::now() + kLong));
        std::uint64_t inline_before = e.stats().value("am.sent_inline");
        done = false;
        ASSERT_EQ(e.peer(1)->send(kData, {}, small, cb), Result::kOk);
        EXPECT_FALSE(done) << "a completion ran inside send()";
        EXPECT_EQ(e.stats().value("am.sent_inline"), inline_before + 1);
        ASSERT_TRUE(e.run_until([&] { return done; }, Clock::now() + kLong));
        done = false;
        ASSERT_EQ(e.peer(1)->send(kData, {}, large, cb), Result::kOk);
        EXPECT_EQ(e.stats().value("am.sent_inline"), inline_before + 1) << "200 bytes do not go inline";
        ASSERT_TRUE(e.run_until([&] { return done; }, Clock::now() + kLong));
        ASSERT_EQ(e.peer(1)->send(kData, {}, small), Result::kOk);  // without a callback
        EXPECT_EQ(e.stats().value("am.sent_inline"), inline_before + 2);
      },
      [&](Engine& e) { ASSERT_TRUE(e.run_until([&] { return sizes.size() == 4; }, Clock::now() + kLong)); });
  EXPECT_THAT(sizes, ::testing::ElementsAre(8u, 8u, 200u, 8u));
}

TEST_P(Messaging, EverySmallSizeArrivesIntactAndInlineUpToTheCompactHeaderLimit) {
  // A plain message goes inline with the 16-byte compact header when header + user header +
  // payload fit UCX's 92-byte immediate send: every size around that limit, with and without
  // a user header, arrives byte for byte, and exactly those that fit left inline.
  constexpr std::size_t kCompactRoom = 92 - 16;
  Config c = config();
  c.credits = 512;  // more than the messages: none waits for a credit, so each fitting one can go inline
  RankPair pair(c);
  struct Got {
    std::vector<std::byte> header, payload;
  };
  std::vector<Got> got;
  std::atomic<std::size_t> arrived{0};
  ASSERT_TRUE(
      pair.engine(1)
          .register_handler(
              kData,
              [&](Message& m) {
                got.push_back({{m.header().begin(), m.header().end()}, {m.payload().begin(), m.payload().end()}});
                arrived.store(got.size(), std::memory_order_release);
              })
          .ok());
  struct Sent {
    std::vector<std::byte> header, payload;
    bool inlined;
  };
  std::vector<Sent> sent;
  std::size_t completed = 0;
  pair.run(
      [&](Engine& e) {
        bool first = false;  // its completion: the handshake is over
        ASSERT_EQ(send_when_taken(e, {}, [&](absl::Status) { first = true; }), Result::kOk);
        ASSERT_TRUE(e.run_until([&] { return first; }, Clock::now() + kLong));
        std::uint64_t seed = 1;
        for (std::size_t uh : {std::size_t{0}, std::size_t{5}}) {
          for (std::size_t size = 0; size <= kCompactRoom + 4; ++size) {
            Sent s{pattern(uh, seed++), pattern(size, seed++), false};
            std::uint64_t before = e.stats().value("am.sent_inline");
            Result r;
            ASSERT_TRUE(e.run_until(
                [&] {
                  return (r = e.peer(1)->send(kData, s.header, s.payload,
                                              [&](absl::Status st) { completed += st.ok(); })) != Result::kWouldBlock;
                },
                Clock::now() + kLong));
            ASSERT_EQ(r, Result::kOk);
            s.inlined = e.stats().value("am.sent_inline") == before + 1;
            sent.push_back(std::move(s));
            // The next one only once this one is in: UCX's shared-memory queue never fills (it
            // refuses an immediate send then, and the message rightly takes the pool path).
            ASSERT_TRUE(e.run_until([&] { return arrived.load(std::memory_order_acquire) == sent.size() + 1; },
                                    Clock::now() + kLong));
          }
        }
        ASSERT_TRUE(e.run_until([&] { return completed == sent.size(); }, Clock::now() + kLong));
      },
      [&](Engine& e) {
        ASSERT_TRUE(e.run_until([&] { return got.size() == 1 + 2 * (kCompactRoom + 5); }, Clock::now() + kLong));
      });
  ASSERT_EQ(got.size(), sent.size() + 1);
  for (std::size_t i = 0; i < sent.size(); ++i) {
    const Sent& s = sent[i];
    EXPECT_EQ(got[i + 1].header, s.header) << "message " << i;
    EXPECT_EQ(got[i + 1].payload, s.payload) << "message " << i;
    // Sent one at a time to a ready peer with credits to spare: whatever fits leaves inline,
    // and nothing larger does.
    EXPECT_EQ(s.inlined, s.header.size() + s.payload.size() <= kCompactRoom)
        << "user header " << s.header.size() << ", payload " << s.payload.size();
  }
  EXPECT_EQ(pair.engine(1).stats().value("wire.parse_errors"), 0u);
}

TEST_P(Messaging, SendsWaitingForCreditsShareSlotsUpToHalfTheGrant) {
  // The receiver keeps every message, so no credit comes back: after the 8 the grant lets
  // through, 40 small sends wait. Coalesced at enqueue, they ride 4 (half the grant) to a
  // tagged message and take 10 send-pool slots; without coalescing, 40. Released, all arrive
  // intact and in order.
  for (bool coalesce : {true, false}) {
    Config c = config();
    c.credits = 8;
    c.coalesce = coalesce;
    RankPair pair(c);
    std::vector<Message> kept;
    std::vector<std::uint32_t> got;
    std::atomic<bool> keep{true}, counted{false};
    ASSERT_TRUE(pair.engine(1)
                    .register_handler(kData,
                                      [&](Message& m) {
                                        std::uint32_t i;
                                        ASSERT_EQ(m.payload().size(), sizeof(i));
                                        std::memcpy(&i, m.payload().data(), sizeof(i));
                                        got.push_back(i);
                                        if (keep) kept.push_back(std::move(m));
                                      })
                    .ok());
    std::atomic<int> delivered{0};
    pair.run(
        [&](Engine& e) {
          int completed = 0;
          auto cb = [&](absl::Status s) {
            EXPECT_TRUE(s.ok()) << s;
            ++completed;
          };
          for (std::uint32_t i = 0; i < 48; ++i) {
            ASSERT_EQ(e.peer(1)->send(kData, {}, bytes_of(i), cb), Result::kOk);
            if (i == 0) {  // the handshake first: before it, nothing is granted to coalesce into
              ASSERT_TRUE(e.run_until([&] { return delivered.load() == 1; }, Clock::now() + kLong));
            }
          }
          ASSERT_TRUE(e.run_until([&] { return completed == 8; }, Clock::now() + kLong));
          PoolStats ps = e.pool_stats(Direction::kSend);
          std::size_t in_use = ps.classes[0].slots_total - ps.classes[0].slots_free;
          if (coalesce) {
            EXPECT_EQ(in_use, 10u) << "40 waiting sends, 4 to a slot";
          } else {
            EXPECT_EQ(in_use, 40u);
          }
          counted = true;
          ASSERT_TRUE(e.run_until([&] { return completed == 48; }, Clock::now() + kLong));
        },
        [&](Engine& e) {
          ASSERT_TRUE(e.run_until(
              [&] {
                delivered = static_cast<int>(got.size());
                return counted.load();
              },
              Clock::now() + kLong));
          keep = false;
          kept.clear();  // the credits go back: the waiting sends leave
          ASSERT_TRUE(e.run_until([&] { return got.size() == 48; }, Clock::now() + kLong));
        });
    ASSERT_EQ(got.size(), 48u);
    for (std::uint32_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], i);
  }
}

TEST_P(Messaging, MessagesSentBeforeTheirHandlerIsRegisteredWaitForIt) {
  // Rank 0 progresses for 300 ms before it registers handler 9; rank 1 sends at once, eager
  // messages and a rendezvous one. None is lost: they wait, then arrive in order.
  RankPair pair(config());
  constexpr HandlerId kLate = 9;
  constexpr std::uint32_t kSmall = 10;
  std::vector<std::uint32_t> got;
  pair.run(
      [&](Engine& e) {
        e.run_until([] { return false; }, Clock::now() + std::chrono::milliseconds(300));
        EXPECT_EQ(e.stats().value("am.unclaimed"), kSmall + 1);
        ASSERT_TRUE(e.register_handler(kLate, [&](Message& m) {
                       got.push_back(static_cast<std::uint32_t>(m.payload().size()));
                     }).ok());
        ASSERT_TRUE(e.run_until([&] { return got.size() == kSmall + 1; }, Clock::now() + kLong));
        EXPECT_EQ(e.stats().value("am.unclaimed"), 0u);
      },
      [&](Engine& e) {
        std::vector<std::byte> big(std::size_t{1} << 20);
        for (std::uint32_t i = 0; i < kSmall; ++i)
          ASSERT_EQ(e.peer(0)->send_copy(kLate, std::vector<std::byte>(i)), Result::kOk);
        std::atomic<bool> done{false};
        ASSERT_EQ(e.peer(0)->send(kLate, {}, big,
                                  [&](absl::Status s) {
                                    EXPECT_TRUE(s.ok()) << s;
                                    done = true;
                                  }),
                  Result::kOk);
        ASSERT_TRUE(e.run_until([&] { return done.load(); }, Clock::now() + kLong));
      });
  std::vector<std::uint32_t> expected;
  for (std::uint32_t i = 0; i < kSmall; ++i) expected.push_back(i);
  expected.push_back(1u << 20);
  EXPECT_EQ(got, expected);
}

TEST_P(Messaging, SixtyFourMegabytesIntact) {
  RankPair pair(config());
  std::vector<std::vector<std::byte>> payloads{pattern(std::size_t{64} << 20, 64)};
  std::vector<std::uint32_t> order;
  send_and_check(pair, payloads, false, &order);
}

TEST_P(Messaging, SendCopyFreesTheCallersBufferAtOnce) {
  RankPair pair(config());
  constexpr int kCount = 200;
  std::vector<std::byte> buf;
  std::vector<std::uint32_t> crcs;
  std::vector<std::uint32_t> got;
  std::size_t bad = 0;
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kData,
                                    [&](Message& m) {
                                      std::uint32_t i;
                                      std::memcpy(&i, m.header().data(), sizeof(i));
                                      if (crc32c(m.payload()) != crcs[i]) ++bad;
                                      got.push_back(i);
                                    })
                  .ok());
  for (int i = 0; i < kCount; ++i)
    crcs.push_back(crc32c(pattern(static_cast<std::size_t>(i) * 977, static_cast<std::uint64_t>(i))));
  int completed = 0;
  pair.run(
      [&](Engine& e) {
        for (std::uint32_t i = 0; i < kCount; ++i) {
          buf = pattern(i * 977, i);
          Result r;
          while ((r = e.peer(1)->send_copy(kData, bytes_of(i), buf, [&](absl::Status s) {
                   EXPECT_TRUE(s.ok());
                   ++completed;
                 })) == Result::kWouldBlock) {
            e.progress();
          }
          ASSERT_EQ(r, Result::kOk);
          std::fill(buf.begin(), buf.end(), std::byte{0xEE});  // reuse at once
        }
        ASSERT_TRUE(e.run_until([&] { return completed == kCount; }, Clock::now() + kLong));
      },
      [&](Engine& e) { ASSERT_TRUE(e.run_until([&] { return got.size() == kCount; }, Clock::now() + kLong)); });
  EXPECT_EQ(bad, 0u);
}

TEST_P(Messaging, ZeroCopyIntoTheApplicationsBufferAndIdenticalBytesWithoutIt) {
  RankPair pair(config());
  std::vector<std::byte> landing(std::size_t{8} << 20);
  std::vector<std::uint32_t> order;
  std::vector<std::vector<std::byte>> payloads{pattern(std::size_t{8} << 20, 5), pattern(std::size_t{3} << 20, 6)};
  std::vector<const std::byte*> where;
  HandlerOptions opts;
  opts.sink = [&](const Message&, std::size_t n) { return std::span(landing).first(n); };
  send_and_check(pair, payloads, false, &order, opts);
  std::uint64_t bounce0 = pair.engine(0).stats().value("am.bounce_copied_bytes");
  std::uint64_t bounce1 = pair.engine(1).stats().value("am.bounce_copied_bytes");
  if (GetParam().rndv) {
    EXPECT_EQ(bounce0, 0u);
    EXPECT_EQ(bounce1, 0u);
    EXPECT_EQ(crc32c(std::span(landing).first(std::size_t{3} << 20)), crc32c(payloads[1]))
        << "the last payload landed in the application's buffer";
  } else {
    EXPECT_GE(bounce1, (std::size_t{11} << 20));
  }
}

TEST_P(Messaging, EagerAndRendezvousFromOnePeerStayInOrder) {
  RankPair pair(config());
  std::vector<std::vector<std::byte>> payloads;
  for (int i = 0; i < 60; ++i)
    payloads.push_back(
        pattern(i % 3 == 0 ? (std::size_t{256} << 10) + static_cast<std::size_t>(i) : static_cast<std::size_t>(i) * 11,
                static_cast<std::uint64_t>(i)));
  std::vector<std::uint32_t> order;
  send_and_check(pair, payloads, false, &order);
}

TEST_P(Messaging, ClosingEngineDeliversWhatItSentAndThePeerClosesWithoutFailure) {
  // Rank 0 sends eager and rendezvous messages and closes at once, without waiting for a
  // completion: its close sends them all, then BYE, and rank 1 closes the peer only once every
  // one has reached its handler — an orderly close, not a failure.
  RankPair pair(config());
  constexpr int kCount = 200;
  std::vector<std::vector<std::byte>> payloads;
  for (int i = 0; i < kCount; ++i) payloads.push_back(pattern(i % 4 == 3 ? 256 << 10 : 100, i));
  std::vector<std::uint32_t> got;
  std::size_t bad = 0;
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kData,
                                    [&](Message& m) {
                                      std::uint32_t i;
                                      std::memcpy(&i, m.header().data(), sizeof(i));
                                      if (i >= kCount || m.payload().size() != payloads[i].size() ||
                                          std::memcmp(m.payload().data(), payloads[i].data(), payloads[i].size()) != 0)
                                        ++bad;
                                      got.push_back(i);
                                    })
                  .ok());
  std::atomic<int> completed_ok{0};
  Engine& e0 = pair.engine(0);
  std::thread receiver([&] {
    Engine& e1 = pair.engine(1);
    e1.run_until([&] { return got.size() == kCount && !e1.peer(0)->alive(); }, Clock::now() + kLong);
    e1.release_thread();  // the main thread reads its counters below
  });
  for (std::uint32_t i = 0; i < kCount; ++i) {
    Result r;
    while ((r = e0.peer(1)->send(kData, bytes_of(i), payloads[i], [&](absl::Status s) {
             if (s.ok()) ++completed_ok;
           })) == Result::kWouldBlock)
      e0.progress();
    ASSERT_EQ(r, Result::kOk);
  }
  pair.close(0);
  receiver.join();
  EXPECT_EQ(completed_ok.load(), kCount);
  ASSERT_EQ(got.size(), std::size_t{kCount});
  for (int i = 0; i < kCount; ++i) EXPECT_EQ(got[i], static_cast<std::uint32_t>(i));
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(pair.engine(1).stats().value("peers.failed"), 0u) << "a goodbye is not a failure";
}

TEST_P(Messaging, KeptLargeMessagesStayWithinTheReceiveBudgetAndTheRestWait) {
  // docs/memory.md, landings. The receiver keeps every message it gets: 24 payloads of 1 MiB
  // (receive-pool class slots) and 6 MiB (beyond the largest class: landing arenas), 64 MiB in
  // all, meet a 16 MiB receive budget. What does not fit waits, visibly, at the sender; the
  // receiver's memory stays within the budget; once it lets its messages go, the rest land,
  // intact and in order.
  Config c = config();
  c.recv_pool_max = 16 << 20;
  c.send_pool_max = 16 << 20;  // the sender lives in this process too (bounce mode copies)
  RankPair pair(c);
  ASSERT_FALSE(HasFatalFailure());
  constexpr std::size_t kCount = 24;
  std::vector<std::vector<std::byte>> payloads;
  for (std::size_t i = 0; i < kCount; ++i)
    payloads.push_back(pattern(i % 3 == 2 ? 6 << 20 : 1 << 20, static_cast<std::uint32_t>(i)));
  std::vector<std::uint32_t> order;
  std::vector<Message> kept;
  std::size_t bad = 0;
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kData,
                                    [&](Message& m) {
                                      Ledger l;
                                      std::memcpy(&l, m.header().data(), sizeof(l));
                                      if (m.payload().size() != l.size || crc32c(m.payload()) != l.crc) ++bad;
                                      order.push_back(l.seq);
                                      kept.push_back(std::move(m));
                                    })
                  .ok());
  std::size_t rss_before = rss_bytes(), rss_peak = rss_before;
  int stalls = 0;
  pair.run([&](Engine& e) { send_with_ledgers(e, payloads, false); },
           [&](Engine& e) {
             auto deadline = Clock::now() + kLong;
             while (order.size() < kCount && Clock::now() < deadline) {
               // Until nothing more lands for 300 ms.
               std::size_t before;
               do {
                 before = order.size();
                 e.run_until([&] { return order.size() == kCount; }, Clock::now() + std::chrono::milliseconds(300));
               } while (order.size() != before && order.size() < kCount);
               if (order.size() == kCount) break;
               // A busy machine's pause, not a stall: only a payload waiting for memory is one.
               if (e.stats().value("am.landings_waiting") == 0) continue;
               ++stalls;
               rss_peak = std::max(rss_peak, rss_bytes());
               EXPECT_LE(e.pool_stats(Direction::kRecv).mapped_bytes, c.recv_pool_max);
               kept.clear();  // the waiting payloads land now
             }
             EXPECT_GT(e.stats().value("am.landing_waits"), 0u);
             EXPECT_LE(e.pool_stats(Direction::kRecv).high_water_bytes, c.recv_pool_max);
           });
  EXPECT_GT(stalls, 0) << "64 MiB kept against a 16 MiB budget must wait";
  ASSERT_EQ(order.size(), kCount);
  for (std::size_t i = 0; i < kCount; ++i) EXPECT_EQ(order[i], i);
  EXPECT_EQ(bad, 0u);
  // Kept all at once, the 64 MiB would have grown the process by as much; the bound is both
  // budgets (the receiver's, and the sender's in bounce mode) and 8 MiB.
  EXPECT_LT(rss_peak - rss_before, c.recv_pool_max + c.send_pool_max + (std::size_t{8} << 20))
      << "rss grew from " << rss_before << " to " << rss_peak;
  kept.clear();
}

INSTANTIATE_TEST_SUITE_P(Transports, Messaging,
                         ::testing::Values(Transport{"shm", "", true}, Transport{"tcp", "tcp", true},
                                           Transport{"shm_bounce", "", false}, Transport{"tcp_bounce", "tcp", false}),
                         [](const auto& info) { return std::string(info.param.name); });

class Volume : public ::testing::TestWithParam<Transport> {};

TEST_P(Volume, ManySmallMessagesCheckedInOrder) {
  Config c;
  c.tls = GetParam().tls;
  RankPair pair(c);
  const std::uint32_t count = std::string(GetParam().tls).empty() ? 1'000'000 : 200'000;
  std::uint32_t next = 0, bad = 0;
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kData,
                                    [&](Message& m) {
                                      std::uint32_t v, crc;
                                      std::memcpy(&v, m.payload().data(), 4);
                                      std::memcpy(&crc, m.payload().data() + 4, 4);
                                      if (v != next || crc != crc32c(m.payload().first(4))) ++bad;
                                      ++next;
                                    })
                  .ok());
  std::uint32_t done = 0;
  pair.run(
      [&](Engine& e) {
        std::array<std::byte, 8> buf;
        for (std::uint32_t i = 0; i < count; ++i) {
          std::memcpy(buf.data(), &i, 4);
          std::uint32_t crc = crc32c(std::span(buf).first(4));
          std::memcpy(buf.data() + 4, &crc, 4);
          ASSERT_EQ(send_when_taken(e, buf, [&](absl::Status s) { done += s.ok(); }), Result::kOk);
        }
        ASSERT_TRUE(e.run_until([&] { return done == count; }, Clock::now() + kLong));
      },
      [&](Engine& e) { ASSERT_TRUE(e.run_until([&] { return next == count; }, Clock::now() + kLong)); });
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(next, count);
}

INSTANTIATE_TEST_SUITE_P(Transports, Volume,
                         ::testing::Values(Transport{"shm", "", true}, Transport{"tcp", "tcp", true}),
                         [](const auto& info) { return std::string(info.param.name); });

// Both sides stop progressing for longer than the peer timeout (as ranks do in a blocking
// fence that waits for a late rank): when they come back, nobody is declared dead, and what is
// sent next arrives.
TEST(Messaging, APauseOfBothSidesLongerThanThePeerTimeoutIsNoDeath) {
  Config config;
  config.peer_timeout = std::chrono::seconds(1);
  config.heartbeat = std::chrono::milliseconds(100);
  RankPair pair(config);
  constexpr HandlerId kCount = 30;
  std::atomic<int> got{0};
  for (int r : {0, 1}) ASSERT_TRUE(pair.engine(r).register_handler(kCount, [&](Message&) { ++got; }).ok());
  auto side = [&](Engine& e) {
    int other = 1 - e.rank();
    ASSERT_EQ(e.peer(other)->send(kCount, {}, bytes_of(1)), Result::kOk);
    ASSERT_TRUE(e.run_until([&] { return got >= 2; }, Clock::now() + kLong));
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    for (int i = 0; i < 50; ++i) {
      Result r;
      while ((r = e.peer(other)->send(kCount, {}, bytes_of(i))) == Result::kWouldBlock) e.progress();
      ASSERT_EQ(r, Result::kOk);
    }
    ASSERT_TRUE(e.run_until([&] { return got >= 102; }, Clock::now() + kLong));
    // Past one more peer timeout, both still alive: heartbeats flow again.
    e.run_until([] { return false; }, Clock::now() + std::chrono::milliseconds(1500));
    EXPECT_TRUE(e.peer(other)->alive());
    EXPECT_EQ(e.stats().value("peers.failed"), 0u);
  };
  pair.run(side, side);
  EXPECT_EQ(got, 102);
}

TEST(Messaging, ManyHandlersEachGetTheirOwn) {
  RankPair pair;
  constexpr int kHandlers = 200;
  std::vector<int> hits(kHandlers);
  for (int h = 0; h < kHandlers; ++h) {
    ASSERT_TRUE(pair.engine(1)
                    .register_handler(static_cast<HandlerId>(h + 10),
                                      [&, h](Message& m) {
                                        int v;
                                        std::memcpy(&v, m.payload().data(), sizeof(v));
                                        EXPECT_EQ(v, h);
                                        ++hits[static_cast<std::size_t>(h)];
                                      })
                    .ok());
  }
  pair.run(
      [&](Engine& e) {
        for (int round = 0; round < 5; ++round) {
          for (int h = 0; h < kHandlers; ++h) {
            Result r;
            while ((r = e.peer(1)->send(static_cast<HandlerId>(h + 10), {}, bytes_of(h))) == Result::kWouldBlock)
              e.progress();
            ASSERT_EQ(r, Result::kOk);
          }
        }
        e.run_until([] { return false; }, Clock::now() + std::chrono::milliseconds(300));
      },
      [&](Engine& e) {
        e.run_until(
            [&] {
              for (int x : hits)
                if (x != 5) return false;
              return true;
            },
            Clock::now() + kLong);
      });
  for (int h = 0; h < kHandlers; ++h) EXPECT_EQ(hits[static_cast<std::size_t>(h)], 5) << h;
}

TEST(Messaging, HandlerMayKeepMessagesAndCreditsReturnOnRelease) {
  Config c;
  c.credits = 8;
  c.rx_posted = 1;  // one receive posted for the peer: a freed receive slot is the next one filled
  RankPair pair(c);
  std::vector<Message> kept;
  std::deque<Message> ring;  // second phase: the last 4 are kept, the oldest checked and released
  std::atomic<bool> ring_mode{false};
  int seen = 0, next = 8, bad = 0;
  auto check = [&](const Message& k) {
    int v;
    std::memcpy(&v, k.payload().data(), sizeof(v));
    bad += v != next++;
  };
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kData,
                                    [&](Message& m) {
                                      ++seen;
                                      if (!ring_mode) {
                                        kept.push_back(std::move(m));
                                        return;
                                      }
                                      ring.push_back(std::move(m));
                                      if (ring.size() > 4) {
                                        check(ring.front());
                                        ring.pop_front();
                                      }
                                    })
                  .ok());
  constexpr int kCount = 100;
  pair.run([&](Engine& e) { send_numbers(e, kCount); },
           [&](Engine& e) {
             // With all 8 credits held, nothing more can arrive.
             e.run_until([&] { return seen == 8; }, Clock::now() + kLong);
             e.run_until([] { return false; }, Clock::now() + std::chrono::milliseconds(300));
             EXPECT_EQ(seen, 8);
             EXPECT_EQ(kept.size(), 8u);
             for (std::size_t i = 0; i < kept.size(); ++i) {
               int v;
               std::memcpy(&v, kept[i].payload().data(), sizeof(v));
               EXPECT_EQ(v, static_cast<int>(i)) << "kept messages stay valid";
             }
             // The rest waited for those credits, so they arrive coalesced, several to a tagged
             // message whose receive slot goes back as soon as they are handled. Each kept one copied
             // its bytes out when the handler moved it: checked only 4 messages later, after that
             // slot has been reused.
             ring_mode = true;
             kept.clear();
             ASSERT_TRUE(e.run_until([&] { return seen == kCount; }, Clock::now() + kLong));
             for (const Message& k : ring) check(k);
             ring.clear();
           });
  EXPECT_EQ(seen, kCount);
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(next, kCount);
  EXPECT_GT(pair.engine(0).stats().value("am.coalesced"), 0u) << "the waiting sends were coalesced";
}

TEST(Messaging, AHandlerThatProgressesTheEngineKeepsItsMessageIntact) {
  // One receive posted for the peer. While a message's handler progresses the engine, that receive is
  // posted again and the next message lands meanwhile: it must land in a fresh slot, not in
  // the one the handler's Message still reads. (A first message, sent and completed before
  // the others, finishes the handshake: the others then leave one by one, not coalesced.)
  Config c;
  c.rx_posted = 1;
  RankPair pair(c);
  std::vector<int> seen;
  int intact_after_progress = -1;
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kData,
                                    [&](Message& m) {
                                      int v;
                                      std::memcpy(&v, m.payload().data(), sizeof(v));
                                      seen.push_back(v);
                                      if (seen.size() != 2) return;
                                      auto until = Clock::now() + std::chrono::milliseconds(200);
                                      while (Clock::now() < until) pair.engine(1).progress();
                                      std::memcpy(&v, m.payload().data(), sizeof(v));
                                      intact_after_progress = v;
                                    })
                  .ok());
  constexpr int kCount = 10;
  pair.run(
      [&](Engine& e) {
        send_numbers(e, 1);
        send_numbers(e, kCount);
      },
      [&](Engine& e) { ASSERT_TRUE(e.run_until([&] { return seen.size() == kCount + 1; }, Clock::now() + kLong)); });
  EXPECT_EQ(intact_after_progress, 0);
  std::vector<int> expected{0};
  for (int i = 0; i < kCount; ++i) expected.push_back(i);
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(pair.engine(0).stats().value("am.coalesced"), 0u) << "sent one by one";
}

TEST(Messaging, AReleasedMessageMayStillBeMoved) {
  RankPair pair;
  int moved_valid = -1;
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kData,
                                    [&](Message& m) {
                                      m.release();
                                      Message kept = std::move(m);
                                      moved_valid = kept.valid();
                                    })
                  .ok());
  pair.run([&](Engine& e) { send_numbers(e, 1); },
           [&](Engine& e) { ASSERT_TRUE(e.run_until([&] { return moved_valid != -1; }, Clock::now() + kLong)); });
  EXPECT_EQ(moved_valid, 0);
}

TEST(Messaging, AMessageReleasedOnAnotherThreadStillReturnsItsCredit) {
  // Two credits, 20 messages: every handler hands its Message to a thread of its own, which
  // releases it there. The release is handed back to the engine thread, so the credits return
  // and all 20 arrive (with the release done off the engine thread, the credit accounting
  // and the CREDIT message would race with the engine).
  Config c;
  c.credits = 2;
  RankPair pair(c);
  std::vector<std::thread> releasers;
  int seen = 0;
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kData,
                                    [&](Message& m) {
                                      ++seen;
                                      auto held = std::make_shared<Message>(std::move(m));
                                      releasers.emplace_back([held]() mutable {
                                        held->release();
                                        held.reset();
                                      });
                                    })
                  .ok());
  constexpr int kCount = 20;
  pair.run([&](Engine& e) { send_numbers(e, kCount); },
           [&](Engine& e) { ASSERT_TRUE(e.run_until([&] { return seen == kCount; }, Clock::now() + kLong)); });
  for (auto& t : releasers) t.join();
  EXPECT_EQ(seen, kCount);
}

TEST(Messaging, SlowReceiverKeepsBothSidesBounded) {
  Config c;
  c.credits = 16;
  c.send_queue_max = 64;
  c.recv_pool_max = 8 << 20;
  RankPair pair(c);
  std::vector<int> got;
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kData,
                                    [&](Message& m) {
                                      int v;
                                      std::memcpy(&v, m.payload().data(), sizeof(v));
                                      got.push_back(v);
                                    })
                  .ok());
  constexpr int kCount = 5000;
  int would_block = 0, completed = 0;
  std::array<std::byte, 4096> payload{};
  std::size_t rss_before = rss_bytes();
  std::size_t rss_peak = rss_before;
  pair.run(
      [&](Engine& e) {
        for (int i = 0; i < kCount;) {
          std::memcpy(payload.data(), &i, sizeof(i));
          Result r = e.peer(1)->send_copy(kData, {}, payload, [&](absl::Status s) { completed += s.ok(); });
          if (r == Result::kWouldBlock) {
            ++would_block;
            if (would_block % 4096 == 0) rss_peak = std::max(rss_peak, rss_bytes());
            e.progress();
            continue;
          }
          ASSERT_EQ(r, Result::kOk);
          ++i;
        }
        ASSERT_TRUE(e.run_until([&] { return completed == kCount; }, Clock::now() + kLong));
        EXPECT_GT(would_block, 0) << "a full queue answers WouldBlock";
        EXPECT_LE(e.stats().value("flow.send_queue_hwm"), 64u);
        EXPECT_LE(e.pool_stats(Direction::kSend).high_water_bytes, c.send_pool_max);
      },
      [&](Engine& e) {
        // The receiver stops consuming for 5 s, then drains.
        std::this_thread::sleep_for(std::chrono::seconds(5));
        ASSERT_TRUE(e.run_until([&] { return got.size() == kCount; }, Clock::now() + kLong));
        auto ps = e.pool_stats(Direction::kRecv);
        EXPECT_LE(ps.high_water_bytes, ps.budget_bytes);
        EXPECT_LE(ps.high_water_bytes, (16 + 16 + 1) * ps.classes[0].slot_size) << "posted + credits";
      });
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kCount));
  for (int i = 0; i < kCount; ++i) ASSERT_EQ(got[static_cast<std::size_t>(i)], i);
  // 5,000 messages of 4 KiB were offered while the receiver slept: the process grew by far
  // less than those 20 MB (queue of 64, pools bounded, nothing buffered without a credit).
  EXPECT_LT(rss_peak - rss_before, std::size_t{16} << 20) << "rss grew from " << rss_before << " to " << rss_peak;
}

TEST(Messaging, APeerTheBudgetCannotBackIsRefusedNotOvercommitted) {
  // A receive budget of 3 eager slots: less than the minimum a peer needs (2 credits, and a
  // posted receive for each). The connection is refused on both sides, with the reason,
  // instead of promising receive memory that is not there.
  Config c;
  c.recv_pool_max = 3 * 8256;
  c.pool_chunk = 3 * 8256;
  c.pool_classes = {};
  RankPair pair(c);
  pair.run(
      [&](Engine& e) {
        int v = 1;
        EXPECT_EQ(e.peer(1)->send(1, {}, bytes_of(v)), Result::kUnavailable);
        EXPECT_FALSE(e.peer(1)->alive());
      },
      [&](Engine& e) {
        (void)e.peer(0);
        EXPECT_TRUE(e.run_until([&] { return !e.peer(0)->alive(); }, Clock::now() + kLong))
            << "the refusal reaches the other side";
      });
  for (int r = 0; r < 2; ++r) {
    auto ps = pair.engine(r).pool_stats(Direction::kRecv);
    EXPECT_LE(ps.mapped_bytes, ps.budget_bytes);
    EXPECT_LE(ps.classes[0].reserved, 3u);
  }
}

TEST(Messaging, PoolsThatCannotGrowFailCleanlyAndLoseNothing) {
  // docs/reliability.md, allocation and mmap failures. SLUICE_FAULT_AT=pool-grow:N fails every
  // pool growth from the N-th on, as a failed mmap would.
  {
    // At start-up (the send pool's first chunk is growth 1): a clear error, no engine.
    // Read from the process's environment, even with a Config given in code.
    ScopedConfigOverride fault("SLUICE_FAULT_AT", "pool-grow:1");
    auto ctx =
        Context::create(ContextOptions{.config = Config(), .bootstrap = std::move(make_in_process_group(1).front())});
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    auto eng = (*ctx)->create_engine();
    ASSERT_FALSE(eng.ok());
    EXPECT_EQ(eng.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(std::string(eng.status().message()), ::testing::HasSubstr("pool-grow"));
  }
  // At run time. Each rank maps its first send and receive chunks (growths 1 and 2, when
  // its engine is made), then can map no more: no second send chunk, no slot of a large
  // receive class. Rank 0 sends 600 eager messages of 4 KiB (a send slot each) and 12
  // rendezvous payloads of 256 KiB while rank 1 does not consume for a second: rank 0's sends
  // meet a send pool that cannot grow (kWouldBlock, retried after progressing), rank 1's
  // payloads find no large receive slot and no landing arena (they land in heap memory,
  // counted against the receive budget, instead). Every message arrives, intact and in order,
  // and both pools are whole again.
  Config c0;
  c0.pool_chunk = 1 << 20;  // 127 eager slots a chunk: enough for the credits
  std::optional<ScopedConfigOverride> fault;
  fault.emplace("SLUICE_FAULT_AT", "pool-grow:3");
  RankPair pair(c0);
  fault.reset();  // read when the contexts were made
  ASSERT_FALSE(HasFatalFailure());
  std::vector<std::vector<std::byte>> payloads;
  for (int i = 0; i < 612; ++i)
    payloads.push_back(pattern(i % 51 == 50 ? 256 << 10 : 4096, static_cast<std::uint32_t>(i)));
  std::vector<std::uint32_t> order;
  int would_block = 0;
  send_and_check(pair, payloads, false, &order, {}, std::chrono::seconds(1), &would_block);
  EXPECT_GT(would_block, 0) << "the send pool ran out and could not grow";
  for (int r = 0; r < 2; ++r) {
    for (Direction d : {Direction::kSend, Direction::kRecv}) {
      for (const PoolClassStats& cls : pair.engine(r).pool_stats(d).classes) {
        bool first_chunk = cls.name == "recv.eager" || cls.name == "send.eager";
        EXPECT_EQ(cls.growth_events, first_chunk ? 1u : 0u) << "rank " << r << " " << cls.name;
        // The one peer's receives: SLUICE_RX_POSTED, and those grown for messages found waiting.
        std::size_t posted =
            cls.name == "recv.eager" ? c0.rx_posted + pair.engine(r).stats().value("am.receives_grown") : 0;
        EXPECT_EQ(cls.slots_free + posted, cls.slots_total) << "rank " << r << " " << cls.name << ": whole again";
      }
    }
  }
  EXPECT_GT(pair.engine(0).pool_stats(Direction::kSend).classes[0].exhaustion_events, 0u);
}

TEST(Messaging, SendFromARegisteredSendSlot) {
  RankPair pair;
  std::uint32_t crc = 0;
  std::size_t got = 0;
  ASSERT_TRUE(pair.engine(1)
                  .register_handler(kData,
                                    [&](Message& m) {
                                      crc = crc32c(m.payload());
                                      got = m.payload().size();
                                    })
                  .ok());
  const std::size_t n = std::size_t{900} << 10;  // rendezvous, from a 1M send-pool slot
  auto data = pattern(n, 77);
  pair.run(
      [&](Engine& e) {
        Slot slot;
        ASSERT_EQ(e.try_get_send_slot(n, &slot), Result::kOk);
        ASSERT_GE(slot.size(), n);
        ASSERT_NE(testing::memh(slot), nullptr);
        std::memcpy(slot.data(), data.data(), n);
        bool done = false;
        EXPECT_EQ(e.peer(1)->send(kData, {}, slot, slot.size() + 1), Result::kInvalidArgument);
        ASSERT_EQ(e.peer(1)->send(kData, {}, slot, n,
                                  [&](absl::Status s) {
                                    EXPECT_TRUE(s.ok()) << s;
                                    done = true;
                                  }),
                  Result::kOk);
        ASSERT_TRUE(e.run_until([&] { return done; }, Clock::now() + kLong));
        EXPECT_EQ(e.stats().value("am.rndv_sent"), 1u);
      },
      [&](Engine& e) { ASSERT_TRUE(e.run_until([&] { return got == n; }, Clock::now() + kLong)); });
  EXPECT_EQ(crc, crc32c(data));
}

TEST(Api, MisuseGetsClearErrors) {
  RankPair pair;
  Engine& e = pair.engine(0);
  EXPECT_EQ(e.register_handler(kMaxHandlers, [](Message&) {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e.register_handler(1, Handler()).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(e.register_handler(1, [](Message&) {}).ok());
  EXPECT_EQ(e.register_handler(1, [](Message&) {}).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(e.unregister_handler(2).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(e.peer(2), nullptr);
  EXPECT_EQ(e.peer(-1), nullptr);
  std::vector<std::byte> big_header(kMaxUserHeader + 1);
  EXPECT_EQ(e.peer(1)->send(1, big_header, {}), Result::kInvalidArgument);
  EXPECT_EQ(e.peer(1)->call(1, {}, {}, {}, ReplyCallback()), Result::kInvalidArgument);
  Config small;
  small.recv_pool_max = 1024;
  ContextOptions o;
  o.config = small;
  auto ctx = Context::create(std::move(o));
  ASSERT_FALSE(ctx.ok());
  EXPECT_THAT(std::string(ctx.status().message()), ::testing::HasSubstr("SLUICE_RECV_POOL_MAX"));
}

}  // namespace
}  // namespace sluice
