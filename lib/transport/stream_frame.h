// The stream transport's frames (internal): tagged messages over one TCP connection, the one
// the front door authenticated. docs/wire-protocol.md ("The stream transport") is the
// normative text; this file implements it.
//
// Every frame starts with a 24-byte little-endian header:
//   0  u8  kind (1 EAGER, 2 RTS, 3 CTS, 4 DATA)    1  u8[3] reserved (0)
//   (a transfer id is never 0; an EAGER frame's id is 0)
//   4  u32 length                                  8  u64 tag     16  u64 transfer id
//   EAGER  a tagged message of `length` bytes (at most the receiver's eager bound), which follow
//   RTS    a tagged message of `length` bytes waits at the sender as transfer `id`; no body
//   CTS    the receiver has posted the buffer for transfer `id`: send it; length and tag 0
//   DATA   the `length` bytes of transfer `id` (exactly the RTS's length), which follow
// With encryption (stream_crypto.h) each header and each body piece of up to kSealChunk bytes
// is sealed on its own: ciphertext of the same length, then a 16-byte tag.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sluice::detail::stream {

inline constexpr std::size_t kHeaderSize = 24;
inline constexpr std::size_t kMacSize = 16;
// The largest body sealed as one piece: a receiver checks and decrypts a DATA body piece by
// piece, in the landing, as it arrives.
inline constexpr std::size_t kSealChunk = std::size_t{64} * 1024;

enum class Kind : std::uint8_t { kEager = 1, kRts = 2, kCts = 3, kData = 4 };

struct Header {
  Kind kind = Kind::kEager;
  std::uint32_t length = 0;
  std::uint64_t tag = 0;
  std::uint64_t id = 0;
};

inline void encode(const Header& h, std::byte* out) {
  out[0] = static_cast<std::byte>(h.kind);
  out[1] = out[2] = out[3] = std::byte{0};
  std::memcpy(out + 4, &h.length, 4);  // little-endian hosts only (checked at build time in wire.h)
  std::memcpy(out + 8, &h.tag, 8);
  std::memcpy(out + 16, &h.id, 8);
}

// False when the header is malformed: an unknown kind, a reserved byte set, or a field that
// its kind requires to be zero is not.
inline bool decode(const std::byte* in, Header* h) {
  auto kind = static_cast<std::uint8_t>(in[0]);
  if (kind < 1 || kind > 4 || in[1] != std::byte{0} || in[2] != std::byte{0} || in[3] != std::byte{0}) return false;
  h->kind = static_cast<Kind>(kind);
  std::memcpy(&h->length, in + 4, 4);
  std::memcpy(&h->tag, in + 8, 8);
  std::memcpy(&h->id, in + 16, 8);
  switch (h->kind) {
    case Kind::kEager: return h->id == 0;
    case Kind::kRts: return h->length != 0 && h->id != 0;
    case Kind::kCts: return h->length == 0 && h->tag == 0 && h->id != 0;
    case Kind::kData: return h->tag == 0 && h->id != 0;
  }
  return false;
}

}  // namespace sluice::detail::stream
