// A latency histogram (internal): log-linear buckets over nanoseconds, 8 per power of two
// (each at most 12.5 % wide), exact below 16 ns, up to 2^40 ns (18 minutes; longer counts
// there). Fixed size, no allocation when recording: one index computation and one add.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>

namespace sluice::detail {

class LatencyHistogram {
 public:
  static constexpr int kSubBits = 3;  // 8 buckets per power of two
  static constexpr int kMaxExponent = 40;
  static constexpr std::size_t kBuckets = 16 + (kMaxExponent - 4) * (1 << kSubBits);

  void record(std::uint64_t ns) {
    ++counts_[index(ns)];
    ++count_;
    max_ = std::max(max_, ns);
  }
  std::uint64_t count() const { return count_; }
  std::uint64_t max() const { return max_; }
  // The smallest bucket bound at or below which a fraction q (0 < q <= 1) of the values lie,
  // never above max(): an upper estimate within one bucket's width. 0 when empty.
  std::uint64_t quantile(double q) const;

  // The bucket of `ns`, and the largest value that bucket holds.
  static std::size_t index(std::uint64_t ns) {
    if (ns < 16) return static_cast<std::size_t>(ns);
    const int e = static_cast<int>(std::bit_width(ns)) - 1;  // 2^e <= ns < 2^(e+1), e >= 4
    if (e >= kMaxExponent) return kBuckets - 1;
    auto sub = static_cast<std::size_t>((ns >> (e - kSubBits)) & ((1u << kSubBits) - 1));
    return 16 + static_cast<std::size_t>(e - 4) * (1u << kSubBits) + sub;
  }
  static std::uint64_t upper_bound(std::size_t i);

 private:
  std::array<std::uint64_t, kBuckets> counts_{};
  std::uint64_t count_ = 0;
  std::uint64_t max_ = 0;
};

}  // namespace sluice::detail
