#include "wire/wire.h"

namespace sluice::detail::wire {

const char* to_string(Parse p) {
  switch (p) {
    case Parse::kOk: return "ok";
    case Parse::kTooShort: return "message shorter than a header";
    case Parse::kBadMagic: return "bad magic";
    case Parse::kBadVersion: return "unsupported protocol version";
    case Parse::kBadFlags: return "bad flags";
    case Parse::kBadLength: return "lengths disagree with the bytes received";
    case Parse::kBadField: return "a field outside its range";
  }
  return "?";
}

Parse decode_other(std::span<const std::byte> bytes, Header* out) {
  const std::byte* p = bytes.data();
  auto flags = get<std::uint8_t>(p + 3);
  if (!(flags & kFlagCompact)) return decode_full(bytes, out);
  if (get<std::uint16_t>(p) != kMagic) return Parse::kBadMagic;
  if (get<std::uint8_t>(p + 2) != kVersion) return Parse::kBadVersion;
  return Parse::kBadFlags;  // compact, but with flags other than none, REQUEST or REPLY
}

Parse decode_full(std::span<const std::byte> bytes, Header* out) {
  if (bytes.size() < kHeaderSize) return Parse::kTooShort;
  const std::byte* p = bytes.data();
  if (get<std::uint16_t>(p) != kMagic) return Parse::kBadMagic;
  if (get<std::uint8_t>(p + 2) != kVersion) return Parse::kBadVersion;
  Header h;
  h.flags = get<std::uint8_t>(p + 3);
  h.handler = get<std::uint16_t>(p + 4);
  h.user_header_len = get<std::uint16_t>(p + 6);
  h.payload_len = get<std::uint32_t>(p + 8);
  h.credits = get<std::uint16_t>(p + 12);
  h.status = get<std::uint16_t>(p + 14);
  h.seq = get<std::uint64_t>(p + 16);
  h.ack = get<std::uint64_t>(p + 24);
  h.rpc_id = get<std::uint64_t>(p + 32);
  h.aux = get<std::uint64_t>(p + 40);
  if (h.flags & kFlagCompact) return Parse::kBadFlags;  // a full header never has COMPACT
  if ((h.flags & kFlagRequest) && (h.flags & kFlagReply)) return Parse::kBadFlags;
  if ((h.flags & kFlagCtrl) && (h.flags & (kFlagRndv | kFlagRequest | kFlagReply | kFlagFrag))) return Parse::kBadFlags;
  if ((h.flags & kFlagFrag) && (h.flags & kFlagRndv)) return Parse::kBadFlags;
  std::size_t body = bytes.size() - kHeaderSize;
  if (h.flags & kFlagMore) {
    // Coalesced: only plain eager messages, and the next one must start inside the bytes.
    if (h.flags & (kFlagCtrl | kFlagRndv | kFlagFrag)) return Parse::kBadFlags;
    if (coalesced_stride(h) + kHeaderSize > bytes.size()) return Parse::kBadLength;
    *out = h;
    return Parse::kOk;
  }
  if (h.flags & kFlagFrag) {
    if (h.user_header_len > body) return Parse::kBadLength;
    std::uint64_t piece = body - h.user_header_len;
    if (piece == 0 || h.aux > h.payload_len || piece > h.payload_len - h.aux) return Parse::kBadLength;
    *out = h;
    return Parse::kOk;
  }
  std::size_t inline_payload = (h.flags & kFlagRndv) ? 0 : h.payload_len;
  // 64-bit sums: no overflow from 16- and 32-bit fields.
  if (static_cast<std::uint64_t>(h.user_header_len) + inline_payload != body) return Parse::kBadLength;
  if ((h.flags & kFlagRndv) && h.payload_len == 0) return Parse::kBadLength;
  *out = h;
  return Parse::kOk;
}

void encode_hello(const Hello& h, std::byte* out) {
  put<std::uint32_t>(out + 0, h.rank);
  put<std::uint32_t>(out + 4, h.engine_id);
  put<std::uint32_t>(out + 8, h.eager_max);
  put<std::uint32_t>(out + 12, h.credits);
  put<std::uint32_t>(out + 16, h.rpc_window);
  put<std::uint32_t>(out + 20, h.reply_index);
  put<std::uint64_t>(out + 24, h.incarnation);
  put<std::uint64_t>(out + 32, h.rx_key);
}

Parse decode_hello(std::span<const std::byte> bytes, Hello* out) {
  if (bytes.size() != kHelloSize) return Parse::kBadLength;
  const std::byte* p = bytes.data();
  out->rank = get<std::uint32_t>(p + 0);
  out->engine_id = get<std::uint32_t>(p + 4);
  out->eager_max = get<std::uint32_t>(p + 8);
  out->credits = get<std::uint32_t>(p + 12);
  out->rpc_window = get<std::uint32_t>(p + 16);
  out->reply_index = get<std::uint32_t>(p + 20);
  out->incarnation = get<std::uint64_t>(p + 24);
  out->rx_key = get<std::uint64_t>(p + 32);
  if (out->rx_key == 0 || out->rx_key > kIdMask) return Parse::kBadField;
  return Parse::kOk;
}

void encode_grant(const Grant& g, std::byte* out) {
  put<std::uint64_t>(out + 0, g.lent);
  put<std::uint64_t>(out + 8, g.given_up);
  put<std::uint32_t>(out + 16, g.target);
  put<std::uint32_t>(out + 20, g.waiting);
  put<std::uint32_t>(out + 24, g.window);
  put<std::uint32_t>(out + 28, g.window_seen);
  put<std::uint32_t>(out + 32, g.calls_waiting);
  put<std::uint32_t>(out + 36, 0);
}

Parse decode_grant(std::span<const std::byte> bytes, Grant* out) {
  if (bytes.size() != kGrantSize) return Parse::kBadLength;
  const std::byte* p = bytes.data();
  out->lent = get<std::uint64_t>(p + 0);
  out->given_up = get<std::uint64_t>(p + 8);
  out->target = get<std::uint32_t>(p + 16);
  out->waiting = get<std::uint32_t>(p + 20);
  out->window = get<std::uint32_t>(p + 24);
  out->window_seen = get<std::uint32_t>(p + 28);
  out->calls_waiting = get<std::uint32_t>(p + 32);
  // A grant never goes below the 2 credits or the 1 call every peer keeps (given_up and
  // window_seen are checked by their receiver, against what it granted).
  if (out->target < 2 || out->lent < 2 || out->window < 1 || get<std::uint32_t>(p + 36) != 0) return Parse::kBadField;
  return Parse::kOk;
}

}  // namespace sluice::detail::wire
