// LatencyHistogram's bucket bounds and quantiles.
#include "core/latency.h"

#include <cmath>
#include <limits>

namespace sluice::detail {

std::uint64_t LatencyHistogram::upper_bound(std::size_t i) {
  if (i < 16) return i;
  if (i >= kBuckets - 1) return std::numeric_limits<std::uint64_t>::max();
  std::size_t e = 4 + (i - 16) / (1u << kSubBits);
  std::uint64_t sub = (i - 16) % (1u << kSubBits);
  // Bucket (e, sub) holds [2^e + sub * 2^(e-3), 2^e + (sub + 1) * 2^(e-3)).
  return (std::uint64_t{1} << e) + (sub + 1) * (std::uint64_t{1} << (e - kSubBits)) - 1;
}

std::uint64_t LatencyHistogram::quantile(double q) const {
  if (count_ == 0) return 0;
  auto rank = static_cast<std::uint64_t>(std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(count_)));
  rank = std::max<std::uint64_t>(rank, 1);
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < kBuckets; ++i) {
    seen += counts_[i];
    if (seen >= rank) return std::min(upper_bound(i), max_);
  }
  return max_;
}

}  // namespace sluice::detail
