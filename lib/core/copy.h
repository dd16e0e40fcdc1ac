// Payload copies (internal). glibc's memcpy moves 2 KiB to about 1 MiB with `rep movsb`
// (glibc.cpu.x86_rep_movsb_threshold: 2112 bytes on this project's machine). On the AMD EPYC it
// is developed on, `rep movsb` then runs at ~3 GB/s instead of 50-100 when the destination lies
// a few bytes after the source modulo 4 KiB (measured at 1, 4 and 8), and at a third of its
// speed for 16-31 (measured at 16, 24 and 31); from 32 on at full speed. Such pairs are
// ordinary (two heap buffers allocated one after the other sit 16 bytes apart modulo 4 KiB;
// eager packing puts a payload 16 or 48 bytes into its slot), so Sluice copies those with a
// vector loop instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sluice::detail {

// Copies 16-byte vectors, then the tail: no `rep movsb` whatever the placement.
void copy_by_vectors(void* to, const void* from, std::size_t n);

// memcpy, but for the sizes and placements where `rep movsb` falls off (above).
inline void copy_payload(void* to, const void* from, std::size_t n) {
  std::uintptr_t gap = (reinterpret_cast<std::uintptr_t>(to) - reinterpret_cast<std::uintptr_t>(from)) & 4095;
  if (n >= 2048 && n <= (std::size_t{1} << 20) && gap - 1 < 31) [[unlikely]] {
    copy_by_vectors(to, from, n);
    return;
  }
  std::memcpy(to, from, n);
}

}  // namespace sluice::detail
