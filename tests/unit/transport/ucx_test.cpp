// The UCX wrappers against real UCX: one worker with an endpoint to itself.
#include <sys/statvfs.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "transport/transport.h"
#include "transport/ucx.h"
#include "transport/ucx_fifo.h"

namespace sluice::detail {
namespace {

using Clock = std::chrono::steady_clock;

struct Done : TransportOp {
  int calls = 0;
  absl::StatusCode code = absl::StatusCode::kUnknown;
  std::size_t length = 0;
  Tag tag = 0;
};

void record(TransportOp* op, absl::StatusCode code, std::size_t length, Tag tag) {
  auto* d = static_cast<Done*>(op);
  ++d->calls;
  d->code = code;
  d->length = length;
  d->tag = tag;
}

class Loopback : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ctx = TransportContext::create(Config());
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ctx_ = std::move(*ctx);
    auto w = Worker::create(*ctx_);
    ASSERT_TRUE(w.ok()) << w.status();
    worker_ = std::move(*w);
    auto ep = worker_->connect(
        worker_->address(), [](void*, int) {}, nullptr);
    ASSERT_TRUE(ep.ok()) << ep.status();
    ep_ = std::move(*ep);
  }
  void TearDown() override {
    if (ep_.valid()) (void)worker_->wait_request(ep_.start_close(true), Clock::now() + std::chrono::seconds(2));
  }

  // Sends `bytes` with `tag` and progresses until UCX holds it unexpected.
  void send_unexpected(const std::vector<std::byte>& bytes, Tag tag) {
    Done s;
    s.on_complete = record;
    PostResult r = ep_.post_send(&s, bytes.data(), bytes.size(), tag, nullptr);
    ASSERT_NE(r.kind, Post::kError);
    auto until = Clock::now() + std::chrono::seconds(5);
    while ((r.kind == Post::kPending && s.calls == 0) || !worker_->has_unexpected(tag, kFullMask)) {
      ASSERT_LT(Clock::now(), until) << "the message never arrived";
      worker_->progress();
    }
  }

  static std::vector<std::byte> pattern(std::size_t n) {
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>(i * 7 + 1);
    return v;
  }

  std::unique_ptr<TransportContext> ctx_;
  std::unique_ptr<Worker> worker_;
  Endpoint ep_;
};

TEST_F(Loopback, AReceiveMatchingAWaitingMessageCompletesInsideThePostAndHoldsNoRequest) {
  // UCX runs the callback inside ucp_tag_recv_nbx and still returns the (by then freed)
  // request; an op that kept it would later cancel or test a request UCX has reused.
  constexpr Tag kTag = 0x1234;
  auto sent = pattern(40);
  send_unexpected(sent, kTag);
  std::vector<std::byte> buf(64);
  Done d;
  d.on_complete = record;
  PostResult r = worker_->post_recv(Endpoint(), &d, buf.data(), buf.size(), kTag, kFullMask, nullptr);
  ASSERT_EQ(r.kind, Post::kPending);
  EXPECT_EQ(d.calls, 1) << "completed inside the post";
  EXPECT_EQ(d.request, nullptr) << "a completed receive holds no request";
  EXPECT_EQ(d.code, absl::StatusCode::kOk);
  EXPECT_EQ(d.length, sent.size());
  EXPECT_EQ(d.tag, kTag);
  EXPECT_EQ(0, std::memcmp(buf.data(), sent.data(), sent.size()));
}

TEST_F(Loopback, APendingReceiveHoldsItsRequestUntilCancelled) {
  std::vector<std::byte> buf(64);
  Done d;
  d.on_complete = record;
  PostResult r = worker_->post_recv(Endpoint(), &d, buf.data(), buf.size(), 0x77, kFullMask, nullptr);
  ASSERT_EQ(r.kind, Post::kPending);
  EXPECT_NE(d.request, nullptr);
  EXPECT_EQ(d.calls, 0);
  worker_->cancel(&d);
  for (int i = 0; i < 100 && d.calls == 0; ++i) worker_->progress();
  EXPECT_EQ(d.calls, 1);
  EXPECT_EQ(d.code, absl::StatusCode::kCancelled);
  EXPECT_EQ(d.request, nullptr);
}

TEST_F(Loopback, AnExactReceiveRunsInRequestMemoryTheWorkerLendsItsOpForLife) {
  // The re-post of every consumed receive: UCX's request lies in memory the op keeps, not in
  // one taken from UCX's pool and freed per message. Pending, completed (in the post and
  // later) and cancelled, the op's request is that memory, and stays the op's.
  constexpr Tag kTag = 0x4321;
  std::vector<std::byte> buf(64);
  Done d, other;
  d.on_complete = other.on_complete = record;
  ASSERT_EQ(worker_->post_recv_exact(Endpoint(), &d, buf.data(), buf.size(), kTag, nullptr), absl::StatusCode::kOk);
  void* lent = d.own_request;
  ASSERT_NE(lent, nullptr);
  EXPECT_EQ(d.request, lent) << "pending in the lent memory";
  ASSERT_EQ(worker_->post_recv_exact(Endpoint(), &other, buf.data(), buf.size(), kTag + 1, nullptr),
            absl::StatusCode::kOk);
  EXPECT_NE(other.own_request, lent) << "each op its own";
  auto sent = pattern(24);
  Done s;
  s.on_complete = record;
  ASSERT_NE(ep_.post_send(&s, sent.data(), sent.size(), kTag, nullptr).kind, Post::kError);
  for (int i = 0; i < 1000 && d.calls == 0; ++i) worker_->progress();
  ASSERT_EQ(d.calls, 1);
  EXPECT_EQ(d.code, absl::StatusCode::kOk);
  EXPECT_EQ(d.length, sent.size());
  EXPECT_EQ(d.tag, kTag);
  EXPECT_EQ(d.request, nullptr);
  EXPECT_EQ(0, std::memcmp(buf.data(), sent.data(), sent.size()));
  // A message already waiting: completed inside the post, in the same memory.
  send_unexpected(sent, kTag);
  ASSERT_EQ(worker_->post_recv_exact(Endpoint(), &d, buf.data(), buf.size(), kTag, nullptr), absl::StatusCode::kOk);
  EXPECT_EQ(d.calls, 2) << "completed inside the post";
  EXPECT_EQ(d.request, nullptr);
  EXPECT_EQ(d.own_request, lent);
  // Posted again and cancelled.
  ASSERT_EQ(worker_->post_recv_exact(Endpoint(), &d, buf.data(), buf.size(), kTag, nullptr), absl::StatusCode::kOk);
  EXPECT_EQ(d.request, lent);
  worker_->cancel(&d);
  worker_->cancel(&other);
  for (int i = 0; i < 100 && (d.calls < 3 || other.calls == 0); ++i) worker_->progress();
  EXPECT_EQ(d.calls, 3);
  EXPECT_EQ(d.code, absl::StatusCode::kCancelled);
  EXPECT_EQ(other.code, absl::StatusCode::kCancelled);
  EXPECT_EQ(d.own_request, lent);
}

TEST_F(Loopback, TakeUnexpectedFindsByMaskAndReceivesTheMessageOnce) {
  constexpr Tag kClass = Tag{3} << 60, kClassMask = Tag{0xf} << 60;
  EXPECT_EQ(worker_->take_unexpected(kClass, kClassMask).message, nullptr) << "nothing waiting yet";
  auto sent = pattern(300);
  send_unexpected(sent, kClass | 0x42);
  Worker::Unexpected u = worker_->take_unexpected(kClass, kClassMask);
  ASSERT_NE(u.message, nullptr);
  EXPECT_EQ(u.length, sent.size());
  EXPECT_EQ(u.tag, kClass | 0x42);
  EXPECT_FALSE(worker_->has_unexpected(kClass, kClassMask)) << "taken out of the queue";
  std::vector<std::byte> buf(u.length);
  Done d;
  d.on_complete = record;
  PostResult r = worker_->post_recv_message(&d, u, buf.data(), buf.size(), nullptr);
  ASSERT_NE(r.kind, Post::kError);
  for (int i = 0; i < 100 && d.calls == 0; ++i) worker_->progress();
  ASSERT_EQ(d.calls, 1);
  EXPECT_EQ(d.code, absl::StatusCode::kOk);
  EXPECT_EQ(d.request, nullptr);
  EXPECT_EQ(0, std::memcmp(buf.data(), sent.data(), sent.size()));
  EXPECT_EQ(worker_->take_unexpected(kClass, kClassMask).message, nullptr);
}

// The FIFO's probe (Worker::check_fifo) passes a healthy FIFO every time, and neither takes the
// worker's messages nor leaves anything of its own for the worker's receives; a stray message
// of its tag does not fool it.
TEST_F(Loopback, TheFifoProbePassesAHealthyFifoAndTouchesNoMessageOfTheWorker) {
  std::vector<std::byte> bytes(24, std::byte{7});
  constexpr Tag kEngineTag = (Tag{1} << 60) | 42;  // an EAGER-class tag, as the engine's
  send_unexpected(bytes, kEngineTag);
  // A stray message of the probe's own tag, waiting: taken and dropped, not mistaken for a probe.
  send_unexpected(std::vector<std::byte>(8), FifoWatch::kProbeTag);
  for (int i = 0; i < 200; ++i)
    ASSERT_EQ(worker_->check_fifo(std::chrono::seconds(1)), Worker::Fifo::kFlowing) << "probe " << i;
  EXPECT_TRUE(worker_->has_unexpected(kEngineTag, kFullMask)) << "the probe took the worker's message";
  Worker::Unexpected u = worker_->take_unexpected(0, 0);  // anything at all
  ASSERT_NE(u.message, nullptr);
  EXPECT_EQ(u.tag, kEngineTag) << "something of the probe's waits unexpected";
  std::vector<std::byte> buf(64);
  Done d;
  d.on_complete = record;
  ASSERT_NE(worker_->post_recv_message(&d, u, buf.data(), buf.size(), nullptr).kind, Post::kError);
  for (auto until = Clock::now() + std::chrono::seconds(5); d.calls == 0 && Clock::now() < until;) worker_->progress();
  EXPECT_EQ(worker_->take_unexpected(0, 0).message, nullptr) << "a second message waits unexpected";
}

// A local sender wakes a worker armed to sleep with a datagram on the worker's socket, which UCX
// reads only at the next arm (refusing that arm for it) and which until then takes room in the
// sender's socket buffer. drain_wakeups reads it while the worker is awake: the next arm is not
// refused. Without the drain it is, every time.
TEST_F(Loopback, AWakeUpReadWhileAwakeNoLongerRefusesTheNextArm) {
  auto sender = Worker::create(*ctx_);
  ASSERT_TRUE(sender.ok()) << sender.status();
  auto ep = (*sender)->connect(
      worker_->address(), [](void*, int) {}, nullptr);
  ASSERT_TRUE(ep.ok()) << ep.status();
  if (!through_shared_fifo(ep->transports())) GTEST_SKIP() << "no shared-memory FIFO between workers here";
  constexpr Tag kTag = 99;
  for (bool drain : {false, true, false, true}) {
    auto until = Clock::now() + std::chrono::seconds(5);
    while (!worker_->arm()) {  // armed, with nothing pending
      ASSERT_LT(Clock::now(), until);
      worker_->progress();
    }
    std::uint64_t v = 1;
    Done s;
    s.on_complete = record;
    PostResult sent = ep->post_send(&s, &v, sizeof v, kTag, nullptr);  // wakes the armed worker
    ASSERT_NE(sent.kind, Post::kError);
    std::uint64_t got = 0;
    Done d;
    d.on_complete = record;
    PostResult r = worker_->post_recv(*ep, &d, &got, sizeof got, kTag, kFullMask, nullptr);
    ASSERT_NE(r.kind, Post::kError);
    while (r.kind == Post::kPending && d.calls == 0) {  // received while awake (polling, no sleep)
      ASSERT_LT(Clock::now(), until) << "the message never arrived";
      (*sender)->progress();
      worker_->progress();
    }
    while (sent.kind == Post::kPending && s.calls == 0) (*sender)->progress();
    if (drain) worker_->drain_wakeups();
    EXPECT_EQ(worker_->arm(), drain) << (drain ? "drained, yet the arm was refused" : "the arm read no wake-up");
  }
  (void)(*sender)->wait_request(ep->start_close(true), Clock::now() + std::chrono::seconds(2));
}

// Without a shared-memory transport there is no FIFO to watch.
TEST(FifoProbe, NoSharedMemoryNoFifo) {
  Config config;
  config.tls = "tcp";
  auto ctx = TransportContext::create(config);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto w = Worker::create(**ctx);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->check_fifo(std::chrono::seconds(1)), Worker::Fifo::kNone);
  EXPECT_EQ((*w)->check_fifo(std::chrono::seconds(1)), Worker::Fifo::kNone);
}

// ucx.h, shm_fifo_size: twice what one sender can leave unconsumed (3 per credit and 16), a
// power of two, between UCX's 64 and kShmFifoMax.
TEST(ShmFifo, HoldsTwiceWhatOneSenderCanLeaveInIt) {
  EXPECT_EQ(shm_fifo_size(2), 64u);    // 2 x 22 = 44
  EXPECT_EQ(shm_fifo_size(32), 256u);  // 2 x 112 = 224
  EXPECT_EQ(shm_fifo_size(37), 256u);  // 2 x 127 = 254
  EXPECT_EQ(shm_fifo_size(38), 512u);  // 2 x 130 = 260
  EXPECT_EQ(shm_fifo_size(65535), kShmFifoMax);
}

// shm_fifo_credits, the loans' cap: the most credits whose unconsumed elements fit in half the
// FIFO, never below the credits the FIFO was sized for.
TEST(ShmFifo, LendsNoMoreCreditsThanHalfTheFifoHolds) {
  EXPECT_EQ(shm_fifo_credits(256), 37u);  // 3 x 37 + 16 = 127 <= 128 < 3 x 38 + 16
  EXPECT_EQ(shm_fifo_credits(512), 80u);
  EXPECT_EQ(shm_fifo_credits(kShmFifoMax), 165u);
  EXPECT_EQ(shm_fifo_credits(32), 0u);  // below UCX's 64: nothing to lend
  for (std::uint32_t credits = 1; credits <= shm_fifo_credits(kShmFifoMax); ++credits) {
    std::uint32_t fifo = shm_fifo_size(credits);
    EXPECT_GE(shm_fifo_credits(fifo), credits) << fifo;
    EXPECT_LE(2 * (3 * shm_fifo_credits(fifo) + 16), fifo) << credits;
  }
}

// SLUICE_TLS wins over UCX_TLS, and says so; a UCX_TLS alone is left as the user gave it.
TEST(TransportChoice, SluiceTlsOverridingUcxTlsIsLogged) {
  ASSERT_EQ(setenv("UCX_TLS", "tcp", 1), 0);
  auto env = detail::ProcessEnv::from_env();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->ucx_tls, "tcp");
  Config config;
  config.tls = "self,sm";
  ::testing::internal::CaptureStderr();
  auto ctx = TransportContext::create(config, *env);
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(ctx.ok()) << ctx.status();
  EXPECT_NE(log.find("SLUICE_TLS=self,sm overrides UCX_TLS=tcp"), std::string::npos) << log;
  ::testing::internal::CaptureStderr();
  auto alone = TransportContext::create(Config(), *env);
  log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(alone.ok()) << alone.status();
  EXPECT_EQ(log.find("overrides"), std::string::npos) << log;
  unsetenv("UCX_TLS");
}

// UCX's aliases get the shared-memory settings of the transports they stand for (shm and sm:
// sysv, posix, cma; mm: sysv, posix), or local peers lose shared memory under peer error mode;
// in client/server mode UCX's tcp is taken out of the list the alias stands in.
TEST(TransportChoice, AliasesGetTheSettingsOfTheTransportsTheyStandFor) {
  struct Case {
    const char* tls;
    bool mm, cma;
  };
  for (const Case& c :
       {Case{"shm", true, true}, Case{"sm", true, true}, Case{"shm,tcp", true, true}, Case{"mm", true, false},
        Case{"sysv,cma", true, true}, Case{"^sm", false, false}, Case{"tcp", false, false}}) {
    Config config;
    config.tls = c.tls;
    for (bool ucx_tcp : {true, false}) {
      auto ctx = TransportContext::create(config, {}, ucx_tcp);
      ASSERT_TRUE(ctx.ok()) << c.tls << ": " << ctx.status();
      std::string d = (*ctx)->describe();
      std::string set = d.substr(d.find("# set by Sluice:"));
      // Without UCX's tcp, a list of tcp alone leaves UCX every other transport (^tcp).
      bool all_but_tcp = !ucx_tcp && std::string_view(c.tls) == "tcp";
      EXPECT_EQ(set.find("UCX_{SYSV,POSIX}_ERROR_HANDLING=y") != std::string::npos, c.mm || all_but_tcp)
          << c.tls << ": " << set;
      EXPECT_EQ(set.find("UCX_CMA_MEMORY_INVALIDATE=y") != std::string::npos, c.cma || all_but_tcp)
          << c.tls << ": " << set;
      if (!ucx_tcp && std::string_view(c.tls) == "shm,tcp") {
        EXPECT_NE(set.find(" UCX_TLS=shm\n"), std::string::npos) << set;
      }
      // UCX's own polling of idle interfaces is off wherever its TCP is left out (security.md).
      bool tcp = ucx_tcp && (std::string_view(c.tls).find("tcp") != std::string_view::npos || c.tls[0] == '^');
      EXPECT_EQ(set.find("UCX_ADAPTIVE_PROGRESS=n") != std::string::npos, !tcp) << c.tls << ": " << set;
    }
  }
}

// A UCX_ADAPTIVE_PROGRESS of the user's is left as given.
TEST(TransportChoice, AdaptiveProgressTheUserSetIsLeftAlone) {
  ProcessEnv env;
  env.ucx_adaptive_progress_set = true;
  auto ctx = TransportContext::create(Config{}, env, false);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  EXPECT_EQ((*ctx)->describe().find("ADAPTIVE_PROGRESS"), std::string::npos) << (*ctx)->describe();
  auto ours = TransportContext::create(Config{}, ProcessEnv{}, false);
  ASSERT_TRUE(ours.ok()) << ours.status();
  EXPECT_NE((*ours)->describe().find("UCX_ADAPTIVE_PROGRESS=n"), std::string::npos) << (*ours)->describe();
}

// How many SysV shared-memory segments this process has mapped.
int sysv_mappings() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) n += line.find("/SYSV") != std::string::npos;
  return n;
}

// Two workers of `ctx` with an endpoint between them: the endpoint's transports, and whether
// the FIFO probe of the second passed ("" when something failed, with the failure recorded).
std::pair<std::string, bool> reach(const TransportContext& ctx) {
  auto a = Worker::create(ctx);
  auto b = Worker::create(ctx);
  if (!a.ok() || !b.ok()) {
    ADD_FAILURE() << "Worker::create";
    return {};
  }
  auto ep = (*a)->connect((*b)->address(), [](void*, int) {}, nullptr);
  if (!ep.ok()) {
    ADD_FAILURE() << ep.status();
    return {};
  }
  Worker::Fifo fifo = Worker::Fifo::kSlow;  // the probe's first pass may wait for its endpoint's wire-up
  for (auto until = Clock::now() + std::chrono::seconds(2); fifo == Worker::Fifo::kSlow && Clock::now() < until;)
    fifo = (*b)->check_fifo(std::chrono::seconds(1));
  std::string tls = ep->transports();
  (void)(*a)->wait_request(ep->start_close(true), Clock::now() + std::chrono::seconds(2));
  return {tls, fifo == Worker::Fifo::kFlowing};
}

// SysV attaches and detaches all wait on one lock of the IPC namespace (ucx_context.cpp): where
// /dev/shm has room and the user named no transports, local peers meet over posix alone, and
// neither the engine's context nor the FIFO probe's maps a SysV segment.
TEST(TransportChoice, PosixAloneWhereDevShmHasRoom) {
  struct statvfs fs {};
  ASSERT_EQ(::statvfs("/dev/shm", &fs), 0);
  if (std::uint64_t{fs.f_bavail} * fs.f_frsize < (std::uint64_t{256} << 20)) GTEST_SKIP() << "/dev/shm is small";
  ASSERT_EQ(sysv_mappings(), 0) << "a SysV segment was mapped before the test";
  auto ctx = TransportContext::create(Config());
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  EXPECT_EQ((*ctx)->shm_tls(), "posix");
  std::string d = (*ctx)->describe();
  EXPECT_NE(d.find("UCX_TLS=^"), std::string::npos) << d;
  auto [tls, probed] = reach(**ctx);
  EXPECT_NE(tls.find("posix"), std::string::npos) << tls;
  EXPECT_TRUE(probed);
  EXPECT_EQ(sysv_mappings(), 0) << "a SysV segment is mapped";

  // A list of the user's stays as given: shm is sysv and posix, and UCX picks sysv.
  Config shm;
  shm.tls = "shm";
  auto given = TransportContext::create(shm);
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ((*given)->shm_tls(), "sysv,posix");
  auto [shm_tls, shm_probed] = reach(**given);
  EXPECT_NE(shm_tls.find("sysv"), std::string::npos) << shm_tls;
  EXPECT_TRUE(shm_probed);
}

}  // namespace
}  // namespace sluice::detail
