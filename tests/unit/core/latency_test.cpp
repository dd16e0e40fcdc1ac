// LatencyHistogram: bucket bounds, quantiles against exactly computed ones, the clamp.
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/latency.h"

namespace sluice::detail {
namespace {

TEST(LatencyHistogram, EveryValueFallsInABucketWhoseBoundsHoldIt) {
  std::uint64_t previous_bound = 0;
  for (std::size_t i = 0; i + 1 < LatencyHistogram::kBuckets; ++i) {
    std::uint64_t hi = LatencyHistogram::upper_bound(i);
    EXPECT_EQ(LatencyHistogram::index(hi), i) << "the bound itself is in bucket " << i;
    EXPECT_EQ(LatencyHistogram::index(hi + 1), i + 1) << "the next value starts bucket " << i + 1;
    if (i >= 16) {
      EXPECT_LE(hi - previous_bound, previous_bound / 8 + 1) << "at most 12.5 % wide";
    }
    previous_bound = hi;
  }
  EXPECT_EQ(LatencyHistogram::index(std::uint64_t{1} << 45), LatencyHistogram::kBuckets - 1);
  EXPECT_EQ(LatencyHistogram::index(~std::uint64_t{0}), LatencyHistogram::kBuckets - 1);
}

TEST(LatencyHistogram, QuantilesAreUpperBoundsWithinOneBucket) {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> dist(9.0, 1.5);  // around 8 us, a long tail
  LatencyHistogram h;
  std::vector<std::uint64_t> values;
  for (int i = 0; i < 20000; ++i) {
    auto v = static_cast<std::uint64_t>(dist(rng)) + 1;
    values.push_back(v);
    h.record(v);
  }
  std::sort(values.begin(), values.end());
  EXPECT_EQ(h.count(), values.size());
  EXPECT_EQ(h.max(), values.back());
  for (double q : {0.5, 0.9, 0.99, 0.999, 1.0}) {
    std::uint64_t exact = values[static_cast<std::size_t>(q * static_cast<double>(values.size())) - 1];
    std::uint64_t got = h.quantile(q);
    EXPECT_GE(got, exact) << "q=" << q;
    EXPECT_LE(got, exact + exact / 8 + 1) << "q=" << q;
  }
  EXPECT_EQ(h.quantile(1.0), h.max());
}

TEST(LatencyHistogram, EmptyAndSingleValues) {
  LatencyHistogram h;
  EXPECT_EQ(h.quantile(0.5), 0u);
  h.record(3);
  EXPECT_EQ(h.quantile(0.5), 3u);
  h.record(1'000'000);
  EXPECT_EQ(h.quantile(0.5), 3u);
  EXPECT_EQ(h.quantile(0.99), 1'000'000u) << "never above the largest value";
}

}  // namespace
}  // namespace sluice::detail
