// Encryption of the stream transport (internal): an AEAD per direction, keys from the front
// door's handshake, OpenSSL 3's EVP underneath (no cryptography is written here).
//
// AES-256-GCM where both sides' CPUs have AES-NI, else ChaCha20-Poly1305 (IETF). Each sealed piece (a frame header, or
// up to kSealChunk bytes of a body) is its own AEAD message with a 96-bit nonce that is the piece's number in its
// direction (a counter from 0): a piece replayed, reordered, dropped or altered fails to open, and the connection fails
// with it. Sealing and opening work in place: a body is decrypted in the buffer it was received into, the landing the
// handler chose.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace sluice::detail::stream {

using SessionKey = std::array<std::byte, 32>;

enum class Suite : std::uint8_t { kNone = 0, kAes256Gcm = 1, kChaCha20Poly1305 = 2 };
const char* to_string(Suite s);
// Whether this CPU runs libsodium's AES-256-GCM (AES-NI and PCLMUL).
bool aes_available();

class Cipher {
 public:
  Cipher() = default;
  Cipher(Suite suite, const SessionKey& key);
  ~Cipher();
  Cipher(const Cipher&) = delete;
  Cipher& operator=(const Cipher&) = delete;
  Cipher(Cipher&& o) noexcept;
  Cipher& operator=(Cipher&& o) noexcept;

  bool on() const { return suite_ != Suite::kNone; }
  Suite suite() const { return suite_; }
  // Encrypts `len` bytes at `buf` in place and writes the tag at `mac` (kMacSize bytes).
  void seal(std::byte* buf, std::size_t len, std::byte* mac);
  // The same from `src` into `dst` (one pass: no copy first).
  void seal_to(std::byte* dst, const std::byte* src, std::size_t len, std::byte* mac);
  // Decrypts in place; false (and the bytes are garbage) when the tag does not match: a forged,
  // altered, replayed or reordered piece.
  bool open(std::byte* buf, std::size_t len, const std::byte* mac);

 private:
  void nonce(unsigned char out[12]) const;
  Suite suite_ = Suite::kNone;
  std::uint64_t counter_ = 0;
  SessionKey key_{};
  void* ctx_ = nullptr;  // EVP_CIPHER_CTX, keyed once
};

}  // namespace sluice::detail::stream
