// Authentication at the front door (internal): the shared key and the proofs over nonces.
//
// Both sides hold a secret, read from SLUICE_AUTH_KEY_FILE. Each connection has two fresh
// random nonces, the client's and the server's; a proof is HMAC-SHA-256 (libsodium), keyed
// with the secret, over a label naming what is proven, both nonces and, where the frame
// carries one, the sender's index and UCX worker address. A proof thus belongs to one
// connection and one message: replaying a recorded handshake fails on the fresh nonce of the
// side being lied to, and a proof of one kind cannot stand in for another.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <sluice/status.h>

#include "wire/door.h"

namespace sluice::detail::door {

enum class ProofOf : std::uint8_t {
  kServerHello,  // the server knows the key (over both nonces)
  kClient,       // the client knows the key, and this is its index and address
  kAccept,       // the server knows the key, and this is its index and address
};

class Key {
 public:
  // Reads the key file: a regular file, not readable or writable by group or others (as ssh
  // keys), of 16 bytes to 4 KiB; trailing white space (a final newline) is not part of the
  // secret. The 32-byte MAC key is the BLAKE2b hash of the rest. Errors name `variable`.
  static absl::StatusOr<std::unique_ptr<Key>> load(const std::string& path, std::string_view variable);
  // For tests: a key from bytes as they would stand in the file.
  static std::unique_ptr<Key> from_secret(std::string_view secret);
  ~Key();
  Key(const Key&) = delete;
  Key& operator=(const Key&) = delete;

  Proof prove(ProofOf what, const Nonce& client, const Nonce& server, std::uint32_t index = 0,
              std::string_view address = {}, std::uint8_t link = 0) const;
  // Constant-time comparison with the proof this key makes.
  bool verify(const Proof& proof, ProofOf what, const Nonce& client, const Nonce& server, std::uint32_t index = 0,
              std::string_view address = {}, std::uint8_t link = 0) const;
  // The stream transport's session keys for the connection of these nonces: BLAKE2b keyed with
  // the secret over a label and both nonces, one key per direction.
  struct SessionKeys {
    std::array<std::byte, 32> client_to_server, server_to_client;
  };
  SessionKeys session_keys(const Nonce& client, const Nonce& server) const;

 private:
  Key() = default;
  unsigned char key_[32] = {};
};

// A nonce from the operating system's random source (libsodium's randombytes).
Nonce random_nonce();

// Writes a new random key file (mode 0600; refuses to overwrite): sluice-info --new-key.
absl::Status write_new_key(const std::string& path);

}  // namespace sluice::detail::door
