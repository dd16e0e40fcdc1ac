// Test payloads that check themselves: a seeded pattern and a CRC32C over it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace sluice::testing_support {

inline std::uint32_t crc32c(std::span<const std::byte> data) {
  static const std::array<std::uint32_t, 256> kTable = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0x82F63B78u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t c = ~0u;
  for (std::byte b : data) c = kTable[(c ^ static_cast<std::uint8_t>(b)) & 0xff] ^ (c >> 8);
  return ~c;
}

// `size` bytes of a pattern that depends on `seed` (so misplaced bytes show).
inline std::vector<std::byte> pattern(std::size_t size, std::uint64_t seed) {
  std::vector<std::byte> v(size);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (std::size_t i = 0; i < size; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = static_cast<std::byte>(x);
  }
  return v;
}

// The user header every ledger message carries: who, which, how big, what CRC.
struct Ledger {
  std::uint32_t source;
  std::uint32_t seq;
  std::uint64_t size;
  std::uint32_t crc;
};

}  // namespace sluice::testing_support
