#include <gtest/gtest.h>
#include <sluice/stats.h>

namespace sluice {
namespace {

TEST(Stats, CountersAndHighWaterMarks) {
  Stats s;
  Counter& c = s.counter("am.msgs_sent");
  c.add();
  c.add(4);
  EXPECT_EQ(&c, &s.counter("am.msgs_sent"));
  HighWater& h = s.high_water("flow.queue_hwm");
  h.update(3);
  h.update(1);
  EXPECT_EQ(s.value("am.msgs_sent"), 5u);
  EXPECT_EQ(s.value("flow.queue_hwm"), 3u);
  EXPECT_EQ(s.value("missing"), 0u);
  EXPECT_EQ(s.to_json(), R"({"am.msgs_sent": 5, "flow.queue_hwm": 3})");
  EXPECT_NE(s.to_text().find("am.msgs_sent"), std::string::npos);
}

TEST(Stats, ReferencesStayValidAsTheRegistryGrows) {
  Stats s;
  Counter& first = s.counter("first");
  for (int i = 0; i < 1000; ++i) s.counter("c" + std::to_string(i)).add();
  first.add(7);
  EXPECT_EQ(s.value("first"), 7u);
}

TEST(Stats, AnIndexNamesTheSameCounterAsTheRegistryGrows) {
  Stats s;
  s.counter("zeta").add(2);
  s.high_water("alpha").update(9);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s.index_of("zeta"), 0u);  // the order they were made, not sorted
  EXPECT_EQ(s.index_of("alpha"), 1u);
  EXPECT_EQ(s.index_of("missing"), std::nullopt);
  for (int i = 0; i < 100; ++i) s.counter("c" + std::to_string(i)).add();
  s.counter("zeta").add(3);
  EXPECT_EQ(s.name_at(0), "zeta");
  EXPECT_EQ(s.value_at(0), 5u);
  EXPECT_EQ(s.name_at(1), "alpha");
  EXPECT_EQ(s.value_at(1), 9u);  // a high-water mark reads as one
  EXPECT_EQ(s.size(), 102u);
}

}  // namespace
}  // namespace sluice
