// The front door's frames: encode, decode, validate (door.h draws the layout).
#include "wire/door.h"

#include <algorithm>

#include "wire/wire.h"

namespace sluice::detail::door {

using wire::get;
using wire::put;

namespace {

bool zero(std::span<const std::byte> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; });
}

// A bool on the wire is 0 or 1; anything else is a malformed frame, not "true".
bool get_bool(const std::byte* p, bool* out) {
  auto v = get<std::uint8_t>(p);
  *out = v == 1;
  return v <= 1;
}

std::byte* start_frame(Kind kind, std::size_t body_len, std::vector<std::byte>* out) {
  std::size_t at = out->size();
  out->resize(at + kFrameHeaderSize + body_len);  // zeroed: reserved bytes stay 0
  std::byte* p = out->data() + at;
  put<std::uint32_t>(p, kMagic);
  put<std::uint8_t>(p + 4, kVersion);
  put<std::uint8_t>(p + 5, static_cast<std::uint8_t>(kind));
  put<std::uint32_t>(p + 8, static_cast<std::uint32_t>(body_len));
  return p + kFrameHeaderSize;
}

}  // namespace

const char* to_string(Kind k) {
  switch (k) {
    case Kind::kClientHello: return "client hello";
    case Kind::kServerHello: return "server hello";
    case Kind::kClientProof: return "client proof";
    case Kind::kAccept: return "accept";
    case Kind::kRefuse: return "refuse";
  }
  return "?";
}

const char* to_string(AuthMode m) {
  switch (m) {
    case AuthMode::kOff: return "off";
    case AuthMode::kOptional: return "optional";
    case AuthMode::kRequired: return "required";
  }
  return "?";
}

const char* to_string(Parse p) {
  switch (p) {
    case Parse::kOk: return "ok";
    case Parse::kTooShort: return "too short";
    case Parse::kBadMagic: return "bad magic";
    case Parse::kBadVersion: return "unsupported version";
    case Parse::kBadKind: return "unknown frame kind";
    case Parse::kBadLength: return "body length out of bounds";
    case Parse::kBadField: return "malformed field";
  }
  return "?";
}

Parse decode_header(std::span<const std::byte> bytes, FrameHeader* out) {
  if (bytes.size() < kFrameHeaderSize) return Parse::kTooShort;
  const std::byte* p = bytes.data();
  if (get<std::uint32_t>(p) != kMagic) return Parse::kBadMagic;
  if (get<std::uint8_t>(p + 4) != kVersion) return Parse::kBadVersion;
  auto kind = get<std::uint8_t>(p + 5);
  if (kind < 1 || kind > 5) return Parse::kBadKind;
  if (get<std::uint16_t>(p + 6) != 0 || get<std::uint32_t>(p + 12) != 0) return Parse::kBadField;
  std::uint32_t len = get<std::uint32_t>(p + 8);
  std::uint32_t lo = 0, hi = 0;
  switch (static_cast<Kind>(kind)) {
    case Kind::kClientHello: lo = hi = kClientHelloSize; break;
    case Kind::kServerHello: lo = hi = kServerHelloSize; break;
    case Kind::kClientProof:
    case Kind::kAccept:
      lo = kProofFixedSize + 1;
      hi = kProofFixedSize + kMaxAddress;
      break;
    case Kind::kRefuse:
      lo = kRefuseFixedSize;
      hi = kRefuseFixedSize + kMaxReason;
      break;
  }
  if (len < lo || len > hi) return Parse::kBadLength;
  out->kind = static_cast<Kind>(kind);
  out->body_len = len;
  return Parse::kOk;
}

Parse decode(std::span<const std::byte> body, ClientHello* out) {
  if (body.size() != kClientHelloSize) return Parse::kBadLength;
  const std::byte* p = body.data();
  std::copy_n(p, kNonceSize, out->nonce.begin());
  if (!get_bool(p + 32, &out->has_key) || !zero(body.subspan(33, 7))) return Parse::kBadField;
  return Parse::kOk;
}

Parse decode(std::span<const std::byte> body, ServerHello* out) {
  if (body.size() != kServerHelloSize) return Parse::kBadLength;
  const std::byte* p = body.data();
  std::copy_n(p, kNonceSize, out->nonce.begin());
  auto mode = get<std::uint8_t>(p + 32);
  if (mode > 2 || !get_bool(p + 33, &out->has_proof) || !zero(body.subspan(34, 6))) return Parse::kBadField;
  out->mode = static_cast<AuthMode>(mode);
  std::copy_n(p + 40, kProofSize, out->proof.begin());
  if (!out->has_proof && !zero(std::span(out->proof))) return Parse::kBadField;
  return Parse::kOk;
}

Parse decode(std::span<const std::byte> body, Credentials* out) {
  if (body.size() < kProofFixedSize + 1 || body.size() > kProofFixedSize + kMaxAddress) return Parse::kBadLength;
  const std::byte* p = body.data();
  std::copy_n(p, kProofSize, out->proof.begin());
  out->link = get<std::uint8_t>(p + 33);
  if (!get_bool(p + 32, &out->has_proof) || out->link > 3 || !zero(body.subspan(34, 2)) || !zero(body.subspan(42, 6)))
    return Parse::kBadField;
  if (!out->has_proof && !zero(std::span(out->proof))) return Parse::kBadField;
  out->index = get<std::uint32_t>(p + 36);
  std::size_t len = get<std::uint16_t>(p + 40);
  if (len != body.size() - kProofFixedSize) return Parse::kBadLength;
  if (out->index >= wire::kUnassignedIndex) return Parse::kBadField;  // the 24-bit tag index
  out->address.assign(reinterpret_cast<const char*>(p + kProofFixedSize), len);
  return Parse::kOk;
}

Parse decode(std::span<const std::byte> body, Refuse* out) {
  if (body.size() < kRefuseFixedSize || body.size() > kRefuseFixedSize + kMaxReason) return Parse::kBadLength;
  const std::byte* p = body.data();
  out->code = get<std::uint16_t>(p);
  std::size_t len = get<std::uint16_t>(p + 2);
  if (len != body.size() - kRefuseFixedSize) return Parse::kBadLength;
  if (!zero(body.subspan(4, 4))) return Parse::kBadField;
  out->reason.assign(reinterpret_cast<const char*>(p + kRefuseFixedSize), len);
  return Parse::kOk;
}

void encode(const ClientHello& m, std::vector<std::byte>* out) {
  std::byte* p = start_frame(Kind::kClientHello, kClientHelloSize, out);
  std::copy(m.nonce.begin(), m.nonce.end(), p);
  put<std::uint8_t>(p + 32, m.has_key ? 1 : 0);
}

void encode(const ServerHello& m, std::vector<std::byte>* out) {
  std::byte* p = start_frame(Kind::kServerHello, kServerHelloSize, out);
  std::copy(m.nonce.begin(), m.nonce.end(), p);
  put<std::uint8_t>(p + 32, static_cast<std::uint8_t>(m.mode));
  put<std::uint8_t>(p + 33, m.has_proof ? 1 : 0);
  if (m.has_proof) std::copy(m.proof.begin(), m.proof.end(), p + 40);
}

void encode(Kind kind, const Credentials& m, std::vector<std::byte>* out) {
  std::size_t len = std::min(m.address.size(), kMaxAddress);
  std::byte* p = start_frame(kind, kProofFixedSize + len, out);
  if (m.has_proof) std::copy(m.proof.begin(), m.proof.end(), p);
  put<std::uint8_t>(p + 32, m.has_proof ? 1 : 0);
  put<std::uint8_t>(p + 33, m.link);
  put<std::uint32_t>(p + 36, m.index);
  put<std::uint16_t>(p + 40, static_cast<std::uint16_t>(len));
  std::memcpy(p + kProofFixedSize, m.address.data(), len);
}

void encode(const Refuse& m, std::vector<std::byte>* out) {
  std::size_t len = std::min(m.reason.size(), kMaxReason);
  std::byte* p = start_frame(Kind::kRefuse, kRefuseFixedSize + len, out);
  put<std::uint16_t>(p, m.code);
  put<std::uint16_t>(p + 2, static_cast<std::uint16_t>(len));
  std::memcpy(p + kRefuseFixedSize, m.reason.data(), len);
}

}  // namespace sluice::detail::door
