// The front door's key and proofs, on libsodium (HMAC-SHA-256, BLAKE2b, randombytes).
#include "door/auth.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <absl/strings/str_format.h>

#include "wire/wire.h"

namespace sluice::detail::door {
namespace {

constexpr std::size_t kMinSecret = 16;
constexpr std::size_t kMaxSecret = 4096;

void init_sodium() {
  // Idempotent and thread-safe; fails only when no random source can be opened.
  if (sodium_init() < 0) std::abort();
}

const char* label(ProofOf what) {
  switch (what) {
    case ProofOf::kServerHello: return "sluice door v2: server hello";
    case ProofOf::kClient: return "sluice door v2: client proof";
    case ProofOf::kAccept: return "sluice door v2: accept";
  }
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<Key>> Key::load(const std::string& path, std::string_view variable) {
  auto fail = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrFormat("%s=%s: %s", variable, path, why));
  };
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return fail(absl::StrFormat("cannot open: %s", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail("not a regular file");
  }
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    return fail(
        absl::StrFormat("mode %04o lets group or others read or write the key; chmod 600 it", st.st_mode & 07777));
  }
  if (st.st_size < static_cast<off_t>(kMinSecret) || st.st_size > static_cast<off_t>(kMaxSecret)) {
    ::close(fd);
    return fail(absl::StrFormat("%d bytes; a key file holds %u to %u bytes (sluice-info --new-key FILE writes one)",
                                st.st_size, kMinSecret, kMaxSecret));
  }
  std::string secret(static_cast<std::size_t>(st.st_size), '\0');
  ssize_t n = ::read(fd, secret.data(), secret.size());
  ::close(fd);
  if (n != static_cast<ssize_t>(secret.size())) {
    sodium_memzero(secret.data(), secret.size());
    return fail("short read");
  }
  while (!secret.empty() && std::strchr(" \t\r\n", secret.back()) != nullptr) secret.pop_back();
  if (secret.size() < kMinSecret) {
    sodium_memzero(secret.data(), secret.size());
    return fail(absl::StrFormat("fewer than %u bytes of secret (white space at the end does not count)", kMinSecret));
  }
  auto key = from_secret(secret);
  sodium_memzero(secret.data(), secret.size());
  return key;
}

std::unique_ptr<Key> Key::from_secret(std::string_view secret) {
  init_sodium();
  std::unique_ptr<Key> key(new Key());
  crypto_generichash(key->key_, sizeof(key->key_), reinterpret_cast<const unsigned char*>(secret.data()), secret.size(),
                     nullptr, 0);
  return key;
}

Key::~Key() { sodium_memzero(key_, sizeof(key_)); }

Proof Key::prove(ProofOf what, const Nonce& client, const Nonce& server, std::uint32_t index, std::string_view address,
                 std::uint8_t link) const {
  static_assert(kProofSize == crypto_auth_hmacsha256_BYTES);
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, key_, sizeof(key_));
  const char* l = label(what);
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(l), std::strlen(l) + 1);
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(client.data()), client.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(server.data()), server.size());
  if (what != ProofOf::kServerHello) {
    std::byte fixed[7];
    wire::put<std::uint32_t>(fixed, index);
    wire::put<std::uint16_t>(fixed + 4, static_cast<std::uint16_t>(address.size()));
    wire::put<std::uint8_t>(fixed + 6, link);
    crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(fixed), sizeof(fixed));
    crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(address.data()), address.size());
  }
  Proof out;
  crypto_auth_hmacsha256_final(&st, reinterpret_cast<unsigned char*>(out.data()));
  sodium_memzero(&st, sizeof(st));
  return out;
}

bool Key::verify(const Proof& proof, ProofOf what, const Nonce& client, const Nonce& server, std::uint32_t index,
                 std::string_view address, std::uint8_t link) const {
  Proof expected = prove(what, client, server, index, address, link);
  return crypto_verify_32(reinterpret_cast<const unsigned char*>(proof.data()),
                          reinterpret_cast<const unsigned char*>(expected.data())) == 0;
}

Key::SessionKeys Key::session_keys(const Nonce& client, const Nonce& server) const {
  SessionKeys out;
  auto derive = [&](const char* label, std::array<std::byte, 32>* key) {
    crypto_generichash_state st;
    crypto_generichash_init(&st, key_, sizeof(key_), key->size());
    crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(label), std::strlen(label) + 1);
    crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(client.data()), client.size());
    crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(server.data()), server.size());
    crypto_generichash_final(&st, reinterpret_cast<unsigned char*>(key->data()), key->size());
    sodium_memzero(&st, sizeof(st));
  };
  derive("sluice stream v1: client to server", &out.client_to_server);
  derive("sluice stream v1: server to client", &out.server_to_client);
  return out;
}

Nonce random_nonce() {
  init_sodium();
  Nonce n;
  randombytes_buf(n.data(), n.size());
  return n;
}

absl::Status write_new_key(const std::string& path) {
  init_sodium();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return absl::InvalidArgumentError(absl::StrFormat("cannot create %s: %s", path, std::strerror(errno)));
  // 32 random bytes, as 64 hex digits and a newline: printable, and 256 bits of secret.
  unsigned char raw[32];
  randombytes_buf(raw, sizeof(raw));
  char hex[65];
  sodium_bin2hex(hex, sizeof(hex), raw, sizeof(raw));
  sodium_memzero(raw, sizeof(raw));
  hex[64] = '\n';
  bool ok = ::write(fd, hex, sizeof(hex)) == static_cast<ssize_t>(sizeof(hex));
  sodium_memzero(hex, sizeof(hex));
  ok = ::close(fd) == 0 && ok;
  if (!ok) return absl::InternalError(absl::StrFormat("cannot write %s", path));
  return absl::OkStatus();
}

}  // namespace sluice::detail::door
