#include "transport/stream_crypto.h"

#include <sodium.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "transport/stream_frame.h"

namespace sluice::detail::stream {

const char* to_string(Suite s) {
  switch (s) {
    case Suite::kNone: return "none";
    case Suite::kAes256Gcm: return "aes-256-gcm";
    case Suite::kChaCha20Poly1305: return "chacha20-poly1305";
  }
  return "?";
}

bool aes_available() {
  static const bool ok = sodium_init() >= 0 && crypto_aead_aes256gcm_is_available() != 0;
  return ok;
}

Cipher::Cipher(Suite suite, const SessionKey& key) : suite_(suite), key_(key) {
  if (suite_ == Suite::kAes256Gcm) {
    // The state must be 16-byte aligned (libsodium's rule for crypto_aead_aes256gcm_state).
    aes_state_ = ::operator new(sizeof(crypto_aead_aes256gcm_state), std::align_val_t{16});
    crypto_aead_aes256gcm_beforenm(static_cast<crypto_aead_aes256gcm_state*>(aes_state_),
                                   reinterpret_cast<const unsigned char*>(key_.data()));
  }
}

Cipher::~Cipher() {
  sodium_memzero(key_.data(), key_.size());
  if (aes_state_ != nullptr) {
    sodium_memzero(aes_state_, sizeof(crypto_aead_aes256gcm_state));
    ::operator delete(aes_state_, std::align_val_t{16});
  }
}

Cipher::Cipher(Cipher&& o) noexcept : suite_(o.suite_), counter_(o.counter_), key_(o.key_), aes_state_(o.aes_state_) {
  o.aes_state_ = nullptr;
  o.suite_ = Suite::kNone;
}

Cipher& Cipher::operator=(Cipher&& o) noexcept {
  if (this != &o) {
    this->~Cipher();
    new (this) Cipher(std::move(o));
  }
  return *this;
}

void Cipher::nonce(unsigned char out[12]) const {
  std::memset(out, 0, 12);
  std::memcpy(out + 4, &counter_, 8);
}

void Cipher::seal(std::byte* buf, std::size_t len, std::byte* mac) {
  unsigned char n[12];
  nonce(n);
  ++counter_;
  auto* b = reinterpret_cast<unsigned char*>(buf);
  auto* m = reinterpret_cast<unsigned char*>(mac);
  if (suite_ == Suite::kAes256Gcm) {
    crypto_aead_aes256gcm_encrypt_detached_afternm(b, m, nullptr, b, len, nullptr, 0, nullptr, n,
                                                   static_cast<crypto_aead_aes256gcm_state*>(aes_state_));
  } else {
    crypto_aead_chacha20poly1305_ietf_encrypt_detached(b, m, nullptr, b, len, nullptr, 0, nullptr, n,
                                                       reinterpret_cast<const unsigned char*>(key_.data()));
  }
}

bool Cipher::open(std::byte* buf, std::size_t len, const std::byte* mac) {
  unsigned char n[12];
  nonce(n);
  ++counter_;
  auto* b = reinterpret_cast<unsigned char*>(buf);
  const auto* m = reinterpret_cast<const unsigned char*>(mac);
  if (suite_ == Suite::kAes256Gcm) {
    return crypto_aead_aes256gcm_decrypt_detached_afternm(b, nullptr, b, len, m, nullptr, 0, n,
                                                          static_cast<crypto_aead_aes256gcm_state*>(aes_state_)) == 0;
  }
  return crypto_aead_chacha20poly1305_ietf_decrypt_detached(b, nullptr, b, len, m, nullptr, 0, n,
                                                            reinterpret_cast<const unsigned char*>(key_.data())) == 0;
}

}  // namespace sluice::detail::stream
