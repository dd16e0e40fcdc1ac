// The public surface keeps one rule per name: what each name promises is checked here at
// compile time, so that a second meaning (an overload that copies where its name does not,
// a test-only observer on a public class, a Result no call returns) fails the build.
#include <concepts>
#include <cstddef>
#include <set>
#include <span>
#include <string>
#include <utility>

#include <gtest/gtest.h>
#include <sluice/sluice.h>
#include <sluice/testing.h>

namespace sluice {
namespace {

using Bytes = std::span<const std::byte>;

// Message::reply is zero copy in every form and always takes an on_done; copying is
// reply_copy. (Before, reply(header, payload) copied while reply(header, payload, on_done)
// did not.)
template <typename M>
concept ReplyWithoutOnDone = requires(M& m, Bytes b) {
  m.reply(b, b);
};
static_assert(!ReplyWithoutOnDone<Message>, "reply(header, payload) would be a copying reply named reply");
static_assert(requires(Message & m, Bytes b, SendCallback cb) { m.reply(b, b, std::move(cb)); });
static_assert(requires(Message & m, Bytes b, const Slot& s, SendCallback cb) { m.reply(b, s, 1, std::move(cb)); });
static_assert(requires(Message & m, Bytes b) { m.reply_copy(b, b); });

// The observers tests need live in <sluice/testing.h>, not on Engine and Slot.
template <typename E>
concept EngineObservesTransport = requires(const E& e) {
  e.outstanding_sends();
}
|| requires(const E& e) { e.posted_exact_receives(); };
static_assert(!EngineObservesTransport<Engine>);
template <typename S>
concept SlotShowsMemoryHandle = requires(const S& s) {
  s.memh();
};
static_assert(!SlotShowsMemoryHandle<Slot>);
static_assert(requires(const Engine& e, const Slot& s) {
  { testing::outstanding_sends(e) } -> std::same_as<std::size_t>;
  { testing::posted_exact_receives(e) } -> std::same_as<std::size_t>;
  { testing::memh(s) } -> std::same_as<void*>;
});

// No public call returns an "exhausted" Result (a full pool is kWouldBlock), so there is none.
template <typename R>
concept HasExhausted = requires {
  R::kExhausted;
};
static_assert(!HasExhausted<Result>);

TEST(Surface, EveryResultHasItsOwnNameAndStatus) {
  std::set<std::string> names;
  for (Result r :
       {Result::kOk, Result::kWouldBlock, Result::kInvalidArgument, Result::kUnavailable, Result::kDeadlineExceeded}) {
    std::string name = to_string(r);
    EXPECT_NE(name, "unknown result");
    EXPECT_TRUE(names.insert(name).second) << name;
    EXPECT_EQ(to_status(r, "x").ok(), r == Result::kOk) << name;
  }
  EXPECT_EQ(to_status(Result::kWouldBlock, "x").code(), absl::StatusCode::kResourceExhausted);
}

TEST(Surface, AnEmptySlotHasNoMemoryHandle) { EXPECT_EQ(testing::memh(Slot()), nullptr); }

}  // namespace
}  // namespace sluice
