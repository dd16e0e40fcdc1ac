// What a newcomer does on a first day (issue "a newcomer's first day without a trap"): each
// case is a mistake or a need that used to crash, lose messages or have no clean way, and now
// has one.
#include <atomic>
#include <chrono>
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

}  // namespace
}  // namespace sluice
