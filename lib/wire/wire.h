// Wire format (internal): tag layout and the header of eager and control messages.
// docs/wire-protocol.md is the normative description; this file implements it.
//
// Tag (64 bits):
//   63    60 59                 36 35                          0
//   ┌───────┬─────────────────────┬─────────────────────────────┐
//   │ class │ sender index (24)   │ key / transfer id (36)      │
//   └───────┴─────────────────────┴─────────────────────────────┘
//   class 1 EAGER: eager and control messages to a peer whose HELLO the sender holds; id =
//     the receive key that HELLO gave. Received by exact receives posted per peer.
//   class 3 CTRL: control messages sent before the receiver's HELLO arrived (HELLO, REJECT),
//     id 0. The receiver takes them out of UCX's unexpected queue (probe by class).
//   class 2 RNDV payload, 4 REPLY payload: received with an exact tag (full mask).
//
// Full header (48 bytes, little-endian), followed by the user header, then (eager only) payload:
//   0  u16 magic 0x51CE      2  u8 version      3  u8 flags
//   4  u16 handler / control kind               6  u16 user header length
//   8  u32 payload length   12  u16 credits returned   14 u16 status (replies)
//   16 u64 sequence         24 u64 ack (highest in-order sequence delivered from the peer)
//   32 u64 rpc id           40 u64 aux (request: reply capacity; hello: incarnation)
// Compact header (16 bytes; 24 for an RPC request or reply): flags COMPACT, alone or with one
// of REQUEST or REPLY. A plain eager message, or a request/reply whose bytes all ride inline.
//   0  u16 magic   2 u8 version   3 u8 flags   4 u16 handler   6 u16 user header length
//   8  u16 credits returned   10 u16 status (replies; zero otherwise)   12 u32 sequence, low 32 bits
//   16 u64 rpc id (REQUEST/REPLY only)
//   The payload is what follows the user header; the receiver extends the sequence against
//   the one it expects next (extend_seq).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace sluice::detail::wire {

inline constexpr std::uint16_t kMagic = 0x51CE;
inline constexpr std::uint8_t kVersion = 4;
inline constexpr std::size_t kHeaderSize = 48;
inline constexpr std::size_t kCompactHeaderSize = 16;  // + 4 with an rpc id
// The bits of an rpc id the compact header carries (a call id of CallTable's always fits).
inline constexpr int kCompactIdBits = 48;

enum TagClass : std::uint64_t { kEager = 1, kRndv = 2, kCtrl = 3, kReply = 4 };
inline constexpr int kClassShift = 60;
inline constexpr int kIndexShift = 36;
inline constexpr std::uint64_t kIdMask = (std::uint64_t{1} << 36) - 1;
inline constexpr std::uint32_t kIndexMask = (1u << 24) - 1;
// No index: a client/server peer's before the front door gave it one; above every valid index.
inline constexpr std::uint32_t kUnassignedIndex = kIndexMask;
// HELLO rank field of a client/server peer.
inline constexpr std::uint32_t kClientRank = 0xffffffffu;
// The mask that compares a tag's class only.
inline constexpr std::uint64_t kClassMask = std::uint64_t{0xf} << kClassShift;

constexpr std::uint64_t make_tag(TagClass cls, std::uint32_t index, std::uint64_t id) {
  return (static_cast<std::uint64_t>(cls) << kClassShift) |
         (static_cast<std::uint64_t>(index & kIndexMask) << kIndexShift) | (id & kIdMask);
}
constexpr std::uint64_t tag_class(std::uint64_t tag) { return tag >> kClassShift; }
constexpr std::uint32_t tag_index(std::uint64_t tag) {
  return static_cast<std::uint32_t>((tag >> kIndexShift) & kIndexMask);
}
constexpr std::uint64_t tag_id(std::uint64_t tag) { return tag & kIdMask; }

enum Flags : std::uint8_t {
  kFlagRndv = 1,       // payload follows as a separate tagged send (class RNDV or REPLY)
  kFlagRequest = 2,    // RPC request; handler is the method
  kFlagReply = 4,      // RPC reply; status holds the code
  kFlagReplyBuf = 8,   // request: the caller posted an exact receive for the reply payload
  kFlagCtrl = 16,      // control message; handler is the control kind
  kFlagFrag = 32,      // bounce mode: one piece of a payload; aux is its offset
  kFlagMore = 64,      // coalesced: another message follows at the next 8-byte boundary
  kFlagCompact = 128,  // the compact header; alone, or with one of REQUEST or REPLY
};

enum CtrlKind : std::uint16_t {
  kHello = 1,
  kCredit = 2,
  kPing = 3,
  kPong = 4,
  kBye = 5,
  kReject = 6,
  kDecline = 7,
  kGrant = 8,
};
inline constexpr std::size_t kCtrlKinds = 9;  // kinds are below this
// The longest reason a REJECT or DECLINE carries.
inline constexpr std::size_t kReasonMax = 128;

struct Header {
  std::uint8_t flags = 0;
  std::uint16_t handler = 0;
  std::uint16_t user_header_len = 0;
  std::uint32_t payload_len = 0;
  std::uint16_t credits = 0;
  std::uint16_t status = 0;
  std::uint64_t seq = 0;
  std::uint64_t ack = 0;
  std::uint64_t rpc_id = 0;
  std::uint64_t aux = 0;
  bool operator==(const Header&) const = default;
};

// Bytes of wire header in front of the user header.
constexpr std::size_t compact_size(std::uint8_t flags) {
  return kCompactHeaderSize + ((flags & (kFlagRequest | kFlagReply)) ? 4 : 0);
}
inline std::size_t header_size(const Header& h) {
  return (h.flags & kFlagCompact) ? compact_size(h.flags) : kHeaderSize;
}
// Whether a message with these flags and rpc id may take the compact header (its payload
// inline, no reply buffer, not a fragment or control message; an id of kCompactIdBits).
constexpr bool compactable(std::uint8_t flags, std::uint64_t rpc_id = 0) {
  return (flags & ~(kFlagRequest | kFlagReply)) == 0 && (rpc_id >> kCompactIdBits) == 0;
}
// The full sequence of a compact header's low 32 bits: the one nearest `expected` (credits
// keep every sequence a sender may still send within 2^31 of it).
inline std::uint64_t extend_seq(std::uint64_t expected, std::uint32_t low) {
  return expected + static_cast<std::uint64_t>(static_cast<std::int64_t>(
                        static_cast<std::int32_t>(low - static_cast<std::uint32_t>(expected))));
}

// Where the message after a MORE message starts (8-byte aligned), from its header.
inline std::size_t coalesced_stride(const Header& h) {
  return (kHeaderSize + std::size_t{h.user_header_len} + h.payload_len + 7) / 8 * 8;
}

// HELLO body (the user header of a HELLO control message).
struct Hello {
  std::uint32_t rank = 0;  // sender's rank, or client id in client/server mode
  std::uint32_t engine_id = 0;
  std::uint32_t eager_max = 0;
  std::uint32_t credits = 0;      // credits granted to the receiver of this HELLO
  std::uint32_t rpc_window = 0;   // RPC window granted to the receiver (requests)
  std::uint32_t reply_index = 0;  // the index the receiver puts in tags towards the sender
  std::uint64_t incarnation = 0;
  std::uint64_t rx_key = 0;  // id the receiver of this HELLO puts in its EAGER tags to us
  bool operator==(const Hello&) const = default;
};
inline constexpr std::size_t kHelloSize = 40;

// GRANT body: the credit loans between two engines, both ways (docs/flow-control.md). As the
// receiver of the peer's messages, the sender of a GRANT says how many credits it has granted
// the peer in all (`lent`, the HELLO's included; never decreases) and how many the peer may
// keep (`target`); as a sender it says how many of the peer's credits it gave back in all
// (`given_up`) and how many of its messages wait for the peer's credits (`waiting`). As an RPC
// server it says the call window it grants the peer now (`window`); as a caller, the window of
// the peer's it keeps to (`window_seen`: it has at most that many calls outstanding) and how
// many of its calls wait for the window (`calls_waiting`). Every count is absolute, so a later
// GRANT supersedes an earlier one.
struct Grant {
  std::uint64_t lent = 0;
  std::uint64_t given_up = 0;
  std::uint32_t target = 0;
  std::uint32_t waiting = 0;
  std::uint32_t window = 0;
  std::uint32_t window_seen = 0;
  std::uint32_t calls_waiting = 0;
  bool operator==(const Grant&) const = default;
};
inline constexpr std::size_t kGrantSize = 40;

enum class Parse : std::uint8_t {
  kOk,
  kTooShort,  // fewer bytes than its header
  kBadMagic,
  kBadVersion,
  kBadFlags,   // unknown flag bits or contradictory flags
  kBadLength,  // lengths disagree with the bytes received
  kBadField,   // a field outside its range (a HELLO's receive key)
};
const char* to_string(Parse p);

// Little-endian on the wire; on little-endian hosts a plain copy. Inline: every message
// passes through them.
template <typename T>
T byteswap(T v) {
  if constexpr (sizeof(T) == 1) return v;
  else if constexpr (sizeof(T) == 2) return static_cast<T>(__builtin_bswap16(v));
  else if constexpr (sizeof(T) == 4) return static_cast<T>(__builtin_bswap32(v));
  else return static_cast<T>(__builtin_bswap64(v));
}
template <typename T>
void put(std::byte* p, T v) {
  if constexpr (std::endian::native == std::endian::big) v = byteswap(v);
  std::memcpy(p, &v, sizeof(T));
}
template <typename T>
T get(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  if constexpr (std::endian::native == std::endian::big) v = byteswap(v);
  return v;
}

// Writes kHeaderSize bytes.
inline void encode(const Header& h, std::byte* out) {
  put<std::uint16_t>(out + 0, kMagic);
  put<std::uint8_t>(out + 2, kVersion);
  put<std::uint8_t>(out + 3, h.flags);
  put<std::uint16_t>(out + 4, h.handler);
  put<std::uint16_t>(out + 6, h.user_header_len);
  put<std::uint32_t>(out + 8, h.payload_len);
  put<std::uint16_t>(out + 12, h.credits);
  put<std::uint16_t>(out + 14, h.status);
  put<std::uint64_t>(out + 16, h.seq);
  put<std::uint64_t>(out + 24, h.ack);
  put<std::uint64_t>(out + 32, h.rpc_id);
  put<std::uint64_t>(out + 40, h.aux);
}
// Writes compact_size(flags) bytes; compactable(flags, rpc_id): flags 0, REQUEST or REPLY.
// A reply's handler is not sent (its caller knows the method); its status takes that place,
// and an RPC's id's bits 32-47 take the status's, so that an RPC's header is 20 bytes.
inline std::size_t encode_compact(std::uint8_t flags, std::uint16_t handler, std::uint16_t user_header_len,
                                  std::uint16_t credits, std::uint16_t status, std::uint64_t seq, std::uint64_t rpc_id,
                                  std::byte* out) {
  put<std::uint16_t>(out + 0, kMagic);
  put<std::uint8_t>(out + 2, kVersion);
  put<std::uint8_t>(out + 3, static_cast<std::uint8_t>(flags | kFlagCompact));
  put<std::uint16_t>(out + 4, flags == kFlagReply ? status : handler);
  put<std::uint16_t>(out + 6, user_header_len);
  put<std::uint16_t>(out + 8, credits);
  put<std::uint16_t>(out + 10, flags == 0 ? status : static_cast<std::uint16_t>(rpc_id >> 32));
  put<std::uint32_t>(out + 12, static_cast<std::uint32_t>(seq));
  if (flags == 0) return kCompactHeaderSize;
  put<std::uint32_t>(out + 16, static_cast<std::uint32_t>(rpc_id));
  return kCompactHeaderSize + 4;
}
// Writes a decoded header back in the form it came in (compact or full); returns its size.
inline std::size_t encode_as_decoded(const Header& h, std::byte* out) {
  if (h.flags & kFlagCompact) {
    return encode_compact(static_cast<std::uint8_t>(h.flags & ~kFlagCompact), h.handler, h.user_header_len, h.credits,
                          h.status, h.seq, h.rpc_id, out);
  }
  encode(h, out);
  return kHeaderSize;
}
// Rewrite fields of an encoded (full) header in place (sequence at send time, piggybacked credits
// and acknowledgement at transmit time).
inline void patch_seq(std::byte* out, std::uint64_t seq) { put<std::uint64_t>(out + 16, seq); }
inline void patch_piggyback(std::byte* out, std::uint16_t credits, std::uint64_t ack) {
  put<std::uint16_t>(out + 12, credits);
  put<std::uint64_t>(out + 24, ack);
}
// The flags byte of an encoded header.
inline std::uint8_t flags_of(const std::byte* header) { return static_cast<std::uint8_t>(header[3]); }
inline void set_flags(std::byte* header, std::uint8_t flags) { header[3] = static_cast<std::byte>(flags); }
// Bytes of payload carried inline by a decoded message of `total` bytes.
inline std::size_t inline_payload(const Header& h, std::size_t total) {
  return total - header_size(h) - h.user_header_len;
}
// Parses and checks `bytes` (one whole received message). Never reads past bytes.size(),
// never trusts a length before checking it against bytes.size(). A compact header decodes
// with flags = COMPACT, payload_len from the bytes, and the sequence's low 32 bits in seq.
Parse decode_full(std::span<const std::byte> bytes, Header* out);
// decode() of what does not open like a good compact header: the full form, or the first
// failed check of the compact one (magic, version, flags).
Parse decode_other(std::span<const std::byte> bytes, Header* out);
// A compact header's first four bytes (magic, version, flags) as one little-endian word.
constexpr std::uint32_t compact_lead(std::uint8_t flags) {
  return kMagic | (std::uint32_t{kVersion} << 16) |
         (std::uint32_t{static_cast<std::uint8_t>(flags | kFlagCompact)} << 24);
}
inline Parse decode(std::span<const std::byte> bytes, Header* out) {
  // The compact form inline (every small message takes it), its magic, version and flags
  // checked as one word; the full one out of line.
  if (bytes.size() < kCompactHeaderSize) [[unlikely]]
    return Parse::kTooShort;
  const std::byte* p = bytes.data();
  std::uint8_t rest;
  if (const auto lead = get<std::uint32_t>(p); lead == compact_lead(0)) [[likely]]
    rest = 0;
  else if (lead == compact_lead(kFlagRequest)) rest = kFlagRequest;
  else if (lead == compact_lead(kFlagReply)) rest = kFlagReply;
  else return decode_other(bytes, out);
  auto flags = static_cast<std::uint8_t>(rest | kFlagCompact);
  std::size_t hs = compact_size(flags);
  if (bytes.size() < hs) return Parse::kTooShort;
  std::uint16_t uh = get<std::uint16_t>(p + 6);
  std::size_t body = bytes.size() - hs;
  if (uh > body) return Parse::kBadLength;
  Header h;
  h.flags = flags;
  h.user_header_len = uh;
  h.payload_len = static_cast<std::uint32_t>(body - uh);
  h.credits = get<std::uint16_t>(p + 8);
  h.seq = get<std::uint32_t>(p + 12);
  std::uint16_t at4 = get<std::uint16_t>(p + 4);
  std::uint16_t at10 = get<std::uint16_t>(p + 10);
  if (rest == 0) [[likely]] {
    if (at10 != 0) return Parse::kBadFlags;  // a status on a plain message
    h.handler = at4;
  } else {
    h.rpc_id = (std::uint64_t{at10} << 32) | get<std::uint32_t>(p + 16);
    if (rest == kFlagReply) h.status = at4;  // a reply's handler stays 0: its caller knows the method
    else h.handler = at4;
  }
  *out = h;
  return Parse::kOk;
}

// Walks the messages of one tagged message (several when coalesced: each but the last has
// MORE and the next starts at coalesced_stride): calls fn(header, its bytes) for each, in
// order, until fn returns false. Every header is checked against the bytes that remain before
// anything of it is used; returns the first failure, kOk otherwise.
template <typename Fn>
Parse for_each_message(std::span<const std::byte> bytes, Fn&& fn) {
  std::size_t offset = 0;
  while (true) {
    std::span<const std::byte> rest = bytes.subspan(offset);
    Header h;
    Parse pr = decode(rest, &h);
    if (pr != Parse::kOk) return pr;
    bool more = (h.flags & kFlagMore) != 0;
    std::size_t len = more ? kHeaderSize + h.user_header_len + h.payload_len : rest.size();
    if (!fn(h, rest.first(len)) || !more) return Parse::kOk;
    offset += coalesced_stride(h);  // decode checked that a header fits there
  }
}

void encode_hello(const Hello& h, std::byte* out);  // writes kHelloSize bytes
Parse decode_hello(std::span<const std::byte> bytes, Hello* out);
void encode_grant(const Grant& g, std::byte* out);  // writes kGrantSize bytes
Parse decode_grant(std::span<const std::byte> bytes, Grant* out);

}  // namespace sluice::detail::wire
