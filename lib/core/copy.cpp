#include "core/copy.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace sluice::detail {

void copy_by_vectors(void* to, const void* from, std::size_t n) {
#if defined(__SSE2__)
  auto* d = static_cast<unsigned char*>(to);
  auto* s = static_cast<const unsigned char*>(from);
  // Four vectors a round, all loaded before any is stored (explicit intrinsics: a plain loop
  // would be recognised as memcpy and compiled back into a call to it).
  for (; n >= 64; n -= 64, d += 64, s += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  if (n != 0) std::memcpy(d, s, n);  // under 64 bytes: glibc's vector moves, no rep movsb
#else
  std::memcpy(to, from, n);  // `rep movsb` is an x86 matter
#endif
}

}  // namespace sluice::detail
