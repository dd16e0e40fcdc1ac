// The front door's frames (internal): the pre-handshake a client and a server run over
// Sluice's own TCP socket before anything reaches UCX. docs/wire-protocol.md ("The front
// door") is the normative description; this file implements it.
//
// Every frame is a 16-byte header and a body whose length the header gives; each kind has a
// fixed body size or a small bound, checked before a byte of the body is read:
//   0  u32 magic 0x52444C53 ("SLDR" in memory)   4  u8 version (2)   5  u8 kind
//   6  u16 flags (0)                              8  u32 body length  12 u32 reserved (0)
// Bodies (little-endian; reserved bytes are zero and checked):
//   CLIENT_HELLO (1), 40 B:  nonce[32], u8 has_key, reserved[7]
//   SERVER_HELLO (2), 72 B:  nonce[32], u8 auth mode (0 off, 1 optional, 2 required),
//                            u8 has_proof, reserved[6], proof[32]
//   CLIENT_PROOF (3) and ACCEPT (4), 48 B + address:
//                            proof[32], u8 has_proof, u8 link, reserved[2], u32 index,
//                            u16 address length (1..4096), reserved[6], address
//     link, in CLIENT_PROOF: what the client can do, bits: 1 AES-256-GCM (AES-NI), 2 it wants
//       encryption (SLUICE_ENCRYPT=on); in ACCEPT: how the data travels: 0 UCX (the server
//       reached the client's worker address over shared memory), 1 the stream transport on this
//       connection, 2 the same encrypted with AES-256-GCM, 3 with ChaCha20-Poly1305.
//   REFUSE (5), 8 B + reason: u16 status code, u16 reason length (0..256), reserved[4], reason
// The exchange, one frame at a time each way:
//   client -> CLIENT_HELLO, server -> SERVER_HELLO, client -> CLIENT_PROOF,
//   server -> ACCEPT or REFUSE (the server may REFUSE instead of any frame it sends).
// A connection left to UCX (ACCEPT's link 0) then carries at most one byte each way,
// kLinkGoodbye, sent by a side that closes its engine in order, just before it closes the
// connection; any other byte, or a second, is a protocol violation.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::detail::door {

inline constexpr std::uint32_t kMagic = 0x52444C53;
inline constexpr std::uint8_t kVersion = 2;
inline constexpr std::size_t kFrameHeaderSize = 16;
inline constexpr std::size_t kNonceSize = 32;
inline constexpr std::size_t kProofSize = 32;
inline constexpr std::size_t kMaxAddress = 4096;  // a UCX worker address (a few hundred bytes here)
inline constexpr std::size_t kMaxReason = 256;
inline constexpr std::size_t kClientHelloSize = 40;
inline constexpr std::size_t kServerHelloSize = 72;
inline constexpr std::size_t kProofFixedSize = 48;
inline constexpr std::size_t kRefuseFixedSize = 8;
// The largest frame of any kind: what a connection's buffer holds at most.
inline constexpr std::size_t kMaxFrame = kFrameHeaderSize + kProofFixedSize + kMaxAddress;

enum class Kind : std::uint8_t { kClientHello = 1, kServerHello = 2, kClientProof = 3, kAccept = 4, kRefuse = 5 };
// The goodbye on a link (above): its close that follows is the engine's, not its process's end.
inline constexpr std::byte kLinkGoodbye{0x42};
enum class AuthMode : std::uint8_t { kOff = 0, kOptional = 1, kRequired = 2 };
// ACCEPT's link: how the admitted peer's data travels (stream::Suite for the stream's cipher).
enum class Link : std::uint8_t { kUcx = 0, kStream = 1, kStreamAes = 2, kStreamChaCha = 3 };
inline constexpr std::uint8_t kCanAes = 1, kWantsEncryption = 2;  // CLIENT_PROOF's link bits
const char* to_string(Kind k);
const char* to_string(AuthMode m);

using Nonce = std::array<std::byte, kNonceSize>;
using Proof = std::array<std::byte, kProofSize>;

enum class Parse : std::uint8_t {
  kOk,
  kTooShort,  // fewer bytes than the frame needs (read more)
  kBadMagic,
  kBadVersion,
  kBadKind,
  kBadLength,  // a body length outside its kind's bound
  kBadField,   // a reserved byte set, a flag or mode out of range
};
const char* to_string(Parse p);

struct FrameHeader {
  Kind kind = Kind::kClientHello;
  std::uint32_t body_len = 0;
};

struct ClientHello {
  Nonce nonce{};
  bool has_key = false;
};

struct ServerHello {
  Nonce nonce{};
  AuthMode mode = AuthMode::kOff;
  bool has_proof = false;
  Proof proof{};
};

// CLIENT_PROOF and ACCEPT: who the sender is at the UCX level.
struct Credentials {
  bool has_proof = false;
  Proof proof{};
  std::uint32_t index = 0;  // the sender's index for the receiver: the index in the tags to it
  std::string address;      // the sender's UCX worker address
  std::uint8_t link = 0;    // CLIENT_PROOF: kCanAes | kWantsEncryption; ACCEPT: a Link
};

struct Refuse {
  std::uint16_t code = 0;  // an absl::StatusCode
  std::string reason;
};

// The header of the frame that `bytes` starts with. kTooShort below 16 bytes; otherwise the
// header is checked in full, and its body length against its kind's bound, before any body
// byte is looked at.
Parse decode_header(std::span<const std::byte> bytes, FrameHeader* out);
// Bodies: `body` is exactly the header's body length.
Parse decode(std::span<const std::byte> body, ClientHello* out);
Parse decode(std::span<const std::byte> body, ServerHello* out);
Parse decode(std::span<const std::byte> body, Credentials* out);
Parse decode(std::span<const std::byte> body, Refuse* out);

// Whole frames (header and body), appended to `out`.
void encode(const ClientHello& m, std::vector<std::byte>* out);
void encode(const ServerHello& m, std::vector<std::byte>* out);
void encode(Kind kind, const Credentials& m, std::vector<std::byte>* out);  // kClientProof or kAccept
void encode(const Refuse& m, std::vector<std::byte>* out);

}  // namespace sluice::detail::door
