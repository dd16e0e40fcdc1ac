// The stream's AEAD on OpenSSL 3's EVP interface (AES-256-GCM at 4.3 GB/s on one core here,
// where libsodium's ran at 1.7), with libsodium's check for AES-NI.
#include "transport/stream_crypto.h"

#include <openssl/evp.h>
#include <sodium.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

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
  static const bool kAvailable = sodium_init() >= 0 && crypto_aead_aes256gcm_is_available() != 0;
  return kAvailable;
}

namespace {
EVP_CIPHER_CTX* ctx_of(void* p) { return static_cast<EVP_CIPHER_CTX*>(p); }
}  // namespace

Cipher::Cipher(Suite suite, const SessionKey& key) : suite_(suite), key_(key) {
  // One context per direction, keyed once; each piece sets only its nonce. A context that
  // cannot be made (out of memory) leaves the cipher failing every piece.
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  const EVP_CIPHER* c = suite == Suite::kAes256Gcm ? EVP_aes_256_gcm() : EVP_chacha20_poly1305();
  if (ctx != nullptr &&
      EVP_CipherInit_ex(ctx, c, nullptr, reinterpret_cast<const unsigned char*>(key_.data()), nullptr, -1) == 1) {
    ctx_ = ctx;
  } else {
    EVP_CIPHER_CTX_free(ctx);
  }
}

Cipher::~Cipher() {
  sodium_memzero(key_.data(), key_.size());
  EVP_CIPHER_CTX_free(ctx_of(ctx_));
}

Cipher::Cipher(Cipher&& o) noexcept : suite_(o.suite_), counter_(o.counter_), key_(o.key_), ctx_(o.ctx_) {
  o.ctx_ = nullptr;
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

void Cipher::seal(std::byte* buf, std::size_t len, std::byte* mac) { seal_to(buf, buf, len, mac); }

void Cipher::seal_to(std::byte* dst, const std::byte* src, std::size_t len, std::byte* mac) {
  unsigned char n[12];
  nonce(n);
  ++counter_;
  auto* ctx = ctx_of(ctx_);
  int out = 0;
  bool ok = ctx != nullptr && EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, n) == 1 &&
            EVP_EncryptUpdate(ctx, reinterpret_cast<unsigned char*>(dst), &out,
                              reinterpret_cast<const unsigned char*>(src), static_cast<int>(len)) == 1 &&
            EVP_EncryptFinal_ex(ctx, reinterpret_cast<unsigned char*>(dst) + out, &out) == 1 &&
            EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, kMacSize, mac) == 1;
  // Never reached with a working context; a tag of zeros then fails at the peer, never passes.
  if (!ok) std::memset(mac, 0, kMacSize);
}

bool Cipher::open(std::byte* buf, std::size_t len, const std::byte* mac) {
  unsigned char n[12];
  nonce(n);
  ++counter_;
  auto* ctx = ctx_of(ctx_);
  int out = 0;
  auto* b = reinterpret_cast<unsigned char*>(buf);
  return ctx != nullptr && EVP_DecryptInit_ex(ctx, nullptr, nullptr, nullptr, n) == 1 &&
         EVP_DecryptUpdate(ctx, b, &out, b, static_cast<int>(len)) == 1 &&
         EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, kMacSize, const_cast<std::byte*>(mac)) == 1 &&
         EVP_DecryptFinal_ex(ctx, b + out, &out) == 1;
}

}  // namespace sluice::detail::stream
