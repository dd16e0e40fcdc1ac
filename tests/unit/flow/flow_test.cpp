// Flow-control state machines with crafted inputs: credits, ordering, RPC windows, call tables.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "flow/flow.h"

namespace sluice::detail {
namespace {

TEST(SendCredits, NeverNegativeNeverAboveTheGrant) {
  SendCredits c;
  EXPECT_FALSE(c.try_consume());  // nothing granted before the hello
  c.grant(4);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(c.try_consume());
  EXPECT_FALSE(c.try_consume());
  EXPECT_EQ(c.available(), 0u);
  EXPECT_TRUE(c.give_back(3));
  EXPECT_FALSE(c.give_back(2)) << "5 of 4 would exceed the grant";
  EXPECT_EQ(c.available(), 3u);
  EXPECT_TRUE(c.give_back(1));
  EXPECT_FALSE(c.give_back(1));
  EXPECT_FALSE(c.give_back(0xffffffffu));
  EXPECT_EQ(c.available(), 4u);
}

TEST(SendCredits, ATaggedMessageOfSeveralTakesAllItsCreditsOrNone) {
  SendCredits c;
  c.grant(8);
  EXPECT_TRUE(c.try_consume(5));
  EXPECT_FALSE(c.try_consume(4)) << "4 of the 3 left";
  EXPECT_EQ(c.available(), 3u) << "a refused batch spends nothing";
  EXPECT_TRUE(c.try_consume(3));
  EXPECT_EQ(c.available(), 0u);
}

TEST(SendCredits, ALoanAddsWhatIsNewAndARepeatedOneNothing) {
  SendCredits c;
  c.grant(4);
  EXPECT_TRUE(c.try_consume(4));
  EXPECT_TRUE(c.loan(10, 10));  // 6 more lent: usable at once
  EXPECT_EQ(c.granted(), 10u);
  EXPECT_EQ(c.available(), 6u);
  EXPECT_TRUE(c.loan(10, 10));
  EXPECT_TRUE(c.loan(7, 10)) << "an older count is no error";
  EXPECT_EQ(c.granted(), 10u) << "counts are absolute: nothing added twice";
  EXPECT_FALSE(c.loan(10 + SendCredits::kMaxGrant, 10)) << "past the largest grant any receiver lends";
  EXPECT_EQ(c.granted(), 10u);
  EXPECT_EQ(c.lent(), 10u);
}

TEST(SendCredits, CreditsAboveTheTargetAreGivenUpOnlyWhenUnspent) {
  SendCredits c;
  c.grant(32);
  EXPECT_TRUE(c.try_consume(20));
  EXPECT_TRUE(c.loan(32, 2));
  EXPECT_TRUE(c.above_target());
  EXPECT_EQ(c.settle(0), 12u) << "the 12 unspent go; the 20 in use stay";
  EXPECT_EQ(c.granted(), 20u);
  EXPECT_EQ(c.available(), 0u);
  EXPECT_TRUE(c.give_back(15));
  EXPECT_EQ(c.settle(4), 15u) << "returned ones go too, down to what the queue's next message needs";
  EXPECT_EQ(c.granted(), 5u);
  EXPECT_TRUE(c.give_back(5));
  EXPECT_EQ(c.settle(0), 3u);
  EXPECT_EQ(c.granted(), 2u) << "never below the target";
  EXPECT_EQ(c.settle(0), 0u);
  EXPECT_EQ(c.given_up(), 30u);
  EXPECT_FALSE(c.above_target());
  EXPECT_FALSE(c.give_back(1)) << "a credit given up cannot be returned";
  EXPECT_TRUE(c.loan(40, 10)) << "lent again: 8 more";
  EXPECT_EQ(c.granted(), 10u);
  EXPECT_EQ(c.available(), 10u);
}

TEST(CreditReturn, ExplicitMessageOnceHalfIsOwed) {
  CreditReturn r;
  r.grant(8);
  for (int i = 0; i < 3; ++i) r.released();
  EXPECT_FALSE(r.explicit_due());
  r.released();
  EXPECT_TRUE(r.explicit_due());
  EXPECT_EQ(r.take(), 4);
  EXPECT_EQ(r.take(), 0);
  EXPECT_FALSE(r.explicit_due());
}

TEST(ReorderWindow, PastCurrentFutureSequences) {
  ReorderWindow<std::string> w;
  std::string out;
  EXPECT_EQ(w.offer(1, "a", 8), Arrival::kDeliver);
  ASSERT_TRUE(w.next(&out));
  EXPECT_EQ(out, "a");
  EXPECT_EQ(w.offer(3, "c", 8), Arrival::kEarly);
  EXPECT_FALSE(w.next(&out)) << "2 is missing";
  EXPECT_EQ(w.offer(1, "dup", 8), Arrival::kDuplicate);
  EXPECT_EQ(w.offer(3, "c again", 8), Arrival::kDuplicate);
  EXPECT_EQ(w.offer(2, "b", 8), Arrival::kDeliver);
  ASSERT_TRUE(w.next(&out));
  EXPECT_EQ(out, "b");
  ASSERT_TRUE(w.next(&out));
  EXPECT_EQ(out, "c");
  EXPECT_FALSE(w.next(&out));
  EXPECT_EQ(w.delivered(), 3u);
  EXPECT_EQ(w.offer(100, "far", 8), Arrival::kDuplicate) << "beyond the window is refused";
}

TEST(ReorderWindow, SurvivesWrapping) {
  std::uint64_t start = ~std::uint64_t{0} - 1;  // ...FE, ...FF, 0, 1
  ReorderWindow<int> w(start);
  int out;
  EXPECT_EQ(w.offer(0, 3, 8), Arrival::kEarly);
  EXPECT_EQ(w.offer(start + 1, 2, 8), Arrival::kEarly);
  EXPECT_EQ(w.offer(start, 1, 8), Arrival::kDeliver);
  std::vector<int> got;
  while (w.next(&out)) got.push_back(out);
  EXPECT_EQ(got, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(w.expected(), 1u);
  EXPECT_EQ(w.offer(start, 9, 8), Arrival::kDuplicate) << "a pre-wrap sequence is now in the past";
}

TEST(ReorderWindow, InOrderFastPathOnlyWhenNothingWaits) {
  ReorderWindow<int> w;
  EXPECT_TRUE(w.take_in_order(1));
  EXPECT_FALSE(w.take_in_order(3));
  EXPECT_EQ(w.offer(3, 3, 8), Arrival::kEarly);
  EXPECT_FALSE(w.take_in_order(2)) << "3 waits: the window must see 2 first";
  EXPECT_EQ(w.offer(2, 2, 8), Arrival::kDeliver);
  int out;
  ASSERT_TRUE(w.next(&out));
  ASSERT_TRUE(w.next(&out));
  EXPECT_EQ(out, 3);
  EXPECT_TRUE(w.take_in_order(4));
}

TEST(RequestWindow, NeverAboveCapacity) {
  RequestWindow t(2);
  EXPECT_TRUE(t.try_admit());
  EXPECT_TRUE(t.try_admit());
  EXPECT_FALSE(t.try_admit());
  t.release();
  EXPECT_TRUE(t.try_admit());
  t.release();
  t.release();
  t.release();  // extra releases do not create capacity
  EXPECT_EQ(t.busy(), 0u);
  EXPECT_TRUE(t.try_admit());
  EXPECT_TRUE(t.try_admit());
  EXPECT_FALSE(t.try_admit());
}

TEST(RequestWindow, AnAnsweredRequestFreesItsPlaceBeforeItsReplyHasLeft) {
  // The caller may send its next request as soon as it has a reply; the reply's send may not
  // have completed here yet. That request must find room.
  RequestWindow t(2);
  EXPECT_TRUE(t.try_admit());
  EXPECT_TRUE(t.try_admit());
  t.answer();  // replied; the reply still in flight
  t.answer();
  EXPECT_EQ(t.busy(), 0u);
  EXPECT_EQ(t.replying(), 2u);
  EXPECT_TRUE(t.try_admit());
  EXPECT_TRUE(t.try_admit());
  EXPECT_FALSE(t.try_admit()) << "still never more requests than the grant";
  t.reply_done();
  t.reply_done();
  EXPECT_EQ(t.replying(), 0u);
  t.reply_done();  // extra completions do not go below zero
  EXPECT_EQ(t.replying(), 0u);
}

TEST(CallWindow, NothingStartsBeforeTheGrantAndNeverBeyondIt) {
  CallWindow w;
  EXPECT_FALSE(w.may_start()) << "no HELLO yet: no window";
  w.grant(2);
  ASSERT_TRUE(w.may_start());
  w.start();
  ASSERT_TRUE(w.may_start());
  w.start();
  EXPECT_FALSE(w.may_start());
  EXPECT_EQ(w.outstanding(), 2u);
  w.finish();
  EXPECT_TRUE(w.may_start()) << "a reply frees its place";
  w.finish();
  w.finish();  // an extra end (a late reply) does not go below zero
  EXPECT_EQ(w.outstanding(), 0u);
}

TEST(CallWindow, ALowerGrantWaitsForRepliesAndAResetStartsOver) {
  CallWindow w;
  w.grant(3);
  for (int i = 0; i < 3; ++i) w.start();
  w.grant(1);  // a restarted server grants fewer
  w.finish();
  EXPECT_FALSE(w.may_start()) << "2 outstanding, 1 granted";
  w.finish();
  EXPECT_FALSE(w.may_start());
  w.finish();
  EXPECT_TRUE(w.may_start());
  w.start();
  w.reset();
  EXPECT_EQ(w.outstanding(), 0u);
  EXPECT_FALSE(w.may_start()) << "after a failure nothing goes until the next grant";
}

TEST(CallTable, FindsLiveCallsAndNeverAStaleId) {
  CallTable<std::string> t;
  auto [a, pa] = t.insert();
  auto [b, pb] = t.insert();
  ASSERT_NE(pa, nullptr);
  ASSERT_NE(pb, nullptr);
  *pa = "a";
  *pb = "b";
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(*t.find(a), "a");
  EXPECT_EQ(*t.find(b), "b");
  t.erase(a);
  EXPECT_EQ(t.find(a), nullptr);
  // The freed entry is reused, under a new id: the old one still finds nothing, and the new
  // call starts from a default value.
  auto [c, pc] = t.insert();
  EXPECT_NE(c, a);
  EXPECT_EQ(*pc, "");
  EXPECT_EQ(t.find(a), nullptr);
  EXPECT_EQ(t.find(c), pc);
  // Ids that were never handed out, including ones naming entries beyond the table.
  EXPECT_EQ(t.find(0), nullptr);
  EXPECT_EQ(t.find(~std::uint64_t{0}), nullptr);
  EXPECT_EQ(t.find(c + 1), nullptr);
  // A call's value stays where it is while others come and go.
  for (int i = 0; i < 5000; ++i) t.insert();
  EXPECT_EQ(t.find(b), pb);
  EXPECT_EQ(*pb, "b");
}

TEST(CallTable, ReplyTagBitsStayUniqueWhileOneEntryIsReused) {
  // A REPLY tag carries an id's low 36 bits. With one call at a time the same entry is
  // reused for every call; those bits must still differ from call to call.
  CallTable<int> t;
  std::vector<std::uint64_t> low;
  for (int i = 0; i < 1000; ++i) {
    auto [id, v] = t.insert();
    low.push_back(id & ((std::uint64_t{1} << 36) - 1));
    t.erase(id);
  }
  std::sort(low.begin(), low.end());
  EXPECT_EQ(std::adjacent_find(low.begin(), low.end()), low.end());
}

TEST(CallTable, EntriesInEveryChunkAreFoundAndStayPut) {
  // 1,000 calls span four chunks of 256: each is found by its id, at the address insert()
  // gave, while later chunks are added; an id naming the first entry not yet made finds nothing.
  CallTable<int> t;
  std::vector<std::pair<std::uint64_t, int*>> calls;
  for (int i = 0; i < 1000; ++i) {
    auto [id, v] = t.insert();
    *v = i;
    calls.emplace_back(id, v);
  }
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(t.find(calls[static_cast<std::size_t>(i)].first), calls[static_cast<std::size_t>(i)].second) << i;
    EXPECT_EQ(*calls[static_cast<std::size_t>(i)].second, i);
  }
  EXPECT_EQ(t.find((std::uint64_t{1000} << CallTable<int>::kSeqBits) | 1), nullptr);
  EXPECT_EQ(t.ids_where([](const int& v) { return v == 255 || v == 256 || v == 999; }),
            (std::vector<std::uint64_t>{calls[255].first, calls[256].first, calls[999].first}));
  t.clear();
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.find(calls[0].first), nullptr) << "cleared";
  auto [id, v] = t.insert();
  EXPECT_NE(v, nullptr);
  EXPECT_EQ(t.find(id), v);
}

TEST(CallTable, SelectsIdsAndCountsWhatIsLive) {
  CallTable<int> t;
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 10; ++i) {
    auto [id, v] = t.insert();
    *v = i;
    ids.push_back(id);
  }
  t.erase(ids[3]);
  auto even = t.ids_where([](const int& v) { return v % 2 == 0; });
  EXPECT_EQ(even, (std::vector<std::uint64_t>{ids[0], ids[2], ids[4], ids[6], ids[8]}));
  EXPECT_EQ(t.size(), 9u);
  for (std::uint64_t id : t.ids_where([](const int&) { return true; })) t.erase(id);
  EXPECT_TRUE(t.empty());
}

}  // namespace
}  // namespace sluice::detail

namespace sluice::detail {
namespace {

TEST(SendCredits, AHeartbeatsCountRecoversLostReturnsAndTakesBackDoubleOnes) {
  SendCredits c;
  c.grant(4);
  ASSERT_TRUE(c.try_consume(4));
  ASSERT_TRUE(c.give_back(1));  // the peer returned 3; 2 of them were lost
  EXPECT_EQ(c.reconcile(3), 2);
  EXPECT_EQ(c.available(), 3u);
  EXPECT_EQ(c.reconcile(3), 0) << "counted once";
  // A return taken twice: given up at the next count.
  ASSERT_TRUE(c.give_back(1));
  ASSERT_TRUE(c.give_back(0));
  EXPECT_EQ(c.available(), 4u);
  EXPECT_EQ(c.reconcile(3), -1);
  EXPECT_EQ(c.available(), 3u);
  // Never above the grant, never below zero.
  ASSERT_TRUE(c.try_consume(3));
  EXPECT_EQ(c.reconcile(1), -2);
  EXPECT_EQ(c.available(), 0u);
  EXPECT_EQ(c.reconcile(100), 99);
  EXPECT_EQ(c.available(), 4u);
}

TEST(CreditReturn, CountsWhatItReturnedInAll) {
  CreditReturn r;
  r.grant(4);
  r.released();
  r.released();
  EXPECT_EQ(r.take(), 2);
  r.released();
  EXPECT_EQ(r.take(), 1);
  EXPECT_EQ(r.take(), 0);
  EXPECT_EQ(r.returned(), 3u);
}

}  // namespace
}  // namespace sluice::detail
