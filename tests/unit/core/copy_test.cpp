// copy_payload: every byte copied, nothing around the destination touched, for sizes on both
// sides of the vector loop's range and for placements inside and outside the window it serves.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "core/copy.h"

namespace sluice::detail {
namespace {

TEST(CopyPayload, CopiesEveryByteAndNothingElseForEverySizeAndPlacement) {
  const std::size_t sizes[] = {0,
                               1,
                               15,
                               16,
                               63,
                               64,
                               65,
                               2047,
                               2048,
                               2049,
                               4096 + 7,
                               65536 + 13,
                               std::size_t{1} << 20,
                               (std::size_t{1} << 20) + 1};
  const std::size_t gaps[] = {0, 1, 8, 15, 16, 31, 32, 63, 4095};
  const std::size_t guard = 64;
  std::vector<std::uint8_t> src_mem((std::size_t{1} << 20) + 8192), dst_mem((std::size_t{1} << 20) + 3 * 4096);
  for (std::size_t i = 0; i < src_mem.size(); ++i) src_mem[i] = static_cast<std::uint8_t>(i * 131 + 7);
  auto page = [](std::vector<std::uint8_t>& v) {
    auto a = reinterpret_cast<std::uintptr_t>(v.data());
    return v.data() + (4096 - a % 4096) % 4096;
  };
  std::uint8_t* src = page(src_mem) + 3;  // an odd source address too
  for (std::size_t n : sizes) {
    for (std::size_t gap : gaps) {
      std::uint8_t* base = page(dst_mem);
      std::uint8_t* dst = base + guard + ((reinterpret_cast<std::uintptr_t>(src) + gap - guard) & 4095);
      ASSERT_LE(dst + n + guard, dst_mem.data() + dst_mem.size());
      std::fill(dst_mem.begin(), dst_mem.end(), 0xEE);
      copy_payload(dst, src, n);
      EXPECT_EQ((reinterpret_cast<std::uintptr_t>(dst) - reinterpret_cast<std::uintptr_t>(src)) & 4095, gap);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(dst[i], src[i]) << "size " << n << " gap " << gap << " byte " << i;
      for (std::size_t i = 1; i <= guard; ++i) {
        ASSERT_EQ(dst[-static_cast<std::ptrdiff_t>(i)], 0xEE) << "size " << n << " gap " << gap;
        ASSERT_EQ(dst[n + i - 1], 0xEE) << "size " << n << " gap " << gap;
      }
    }
  }
}

}  // namespace
}  // namespace sluice::detail
