// The front door's frames and proofs: every length at and beyond its bound, reserved bytes,
// round trips; proofs bound to their nonces, their kind and the sender's address; key files.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "door/auth.h"
#include "wire/door.h"
#include "wire/wire.h"

namespace sluice::detail::door {
namespace {

std::vector<std::byte> frame_of(const Credentials& c, Kind k = Kind::kClientProof) {
  std::vector<std::byte> out;
  encode(k, c, &out);
  return out;
}

std::span<const std::byte> body_of(const std::vector<std::byte>& f) { return std::span(f).subspan(kFrameHeaderSize); }

// A frame header claiming `len` body bytes for `kind`.
std::vector<std::byte> header(std::uint8_t kind, std::uint32_t len) {
  std::vector<std::byte> h(kFrameHeaderSize);
  wire::put<std::uint32_t>(h.data(), kMagic);
  wire::put<std::uint8_t>(h.data() + 4, kVersion);
  wire::put<std::uint8_t>(h.data() + 5, kind);
  wire::put<std::uint32_t>(h.data() + 8, len);
  return h;
}

TEST(DoorFrames, EachKindRoundTrips) {
  ClientHello ch;
  ch.nonce = random_nonce();
  ch.has_key = true;
  std::vector<std::byte> f;
  encode(ch, &f);
  FrameHeader h;
  ASSERT_EQ(decode_header(f, &h), Parse::kOk);
  EXPECT_EQ(h.kind, Kind::kClientHello);
  ClientHello ch2;
  ASSERT_EQ(decode(body_of(f), &ch2), Parse::kOk);
  EXPECT_EQ(ch2.nonce, ch.nonce);
  EXPECT_TRUE(ch2.has_key);

  ServerHello sh;
  sh.nonce = random_nonce();
  sh.mode = AuthMode::kRequired;
  sh.has_proof = true;
  sh.proof[3] = std::byte{7};
  f.clear();
  encode(sh, &f);
  ServerHello sh2;
  ASSERT_EQ(decode_header(f, &h), Parse::kOk);
  ASSERT_EQ(decode(body_of(f), &sh2), Parse::kOk);
  EXPECT_EQ(sh2.mode, AuthMode::kRequired);
  EXPECT_EQ(sh2.proof, sh.proof);

  Credentials c{true, {}, 12345, std::string(300, 'a')};
  c.proof[0] = std::byte{1};
  for (Kind k : {Kind::kClientProof, Kind::kAccept}) {
    f = frame_of(c, k);
    ASSERT_EQ(decode_header(f, &h), Parse::kOk);
    EXPECT_EQ(h.kind, k);
    EXPECT_EQ(h.body_len, kProofFixedSize + 300);
    Credentials c2;
    ASSERT_EQ(decode(body_of(f), &c2), Parse::kOk);
    EXPECT_EQ(c2.index, 12345u);
    EXPECT_EQ(c2.address, c.address);
    EXPECT_EQ(c2.proof, c.proof);
  }

  Refuse r{7, "authentication required"};
  f.clear();
  encode(r, &f);
  Refuse r2;
  ASSERT_EQ(decode_header(f, &h), Parse::kOk);
  ASSERT_EQ(decode(body_of(f), &r2), Parse::kOk);
  EXPECT_EQ(r2.code, 7);
  EXPECT_EQ(r2.reason, r.reason);
}

TEST(DoorFrames, BodyLengthsAreCheckedAgainstTheirBoundBeforeAnyBodyByte) {
  struct Case {
    std::uint8_t kind;
    std::uint32_t lo, hi;
  };
  for (Case k : {Case{1, kClientHelloSize, kClientHelloSize}, Case{2, kServerHelloSize, kServerHelloSize},
                 Case{3, kProofFixedSize + 1, kProofFixedSize + kMaxAddress},
                 Case{4, kProofFixedSize + 1, kProofFixedSize + kMaxAddress},
                 Case{5, kRefuseFixedSize, kRefuseFixedSize + kMaxReason}}) {
    for (std::uint64_t len :
         {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{k.lo} - 1, std::uint64_t{k.lo}, std::uint64_t{k.hi},
          std::uint64_t{k.hi} + 1, std::uint64_t{1} << 31, std::uint64_t{0xffffffff}}) {
      FrameHeader h;
      Parse p = decode_header(header(k.kind, static_cast<std::uint32_t>(len)), &h);
      bool in = len >= k.lo && len <= k.hi;
      EXPECT_EQ(p, in ? Parse::kOk : Parse::kBadLength) << "kind " << int(k.kind) << " length " << len;
    }
  }
}

TEST(DoorFrames, MalformedHeadersAreNamed) {
  FrameHeader h;
  auto f = header(1, kClientHelloSize);
  EXPECT_EQ(decode_header(std::span(f).first(15), &h), Parse::kTooShort);
  for (std::uint8_t kind : {0, 6, 255}) EXPECT_EQ(decode_header(header(kind, 40), &h), Parse::kBadKind);
  auto bad = f;
  bad[0] = std::byte{'G'};  // "GET / HTTP/1.1"
  EXPECT_EQ(decode_header(bad, &h), Parse::kBadMagic);
  for (std::uint8_t version : {1, 3, 255}) {  // version 1 had no link byte: refused by name
    bad = f;
    wire::put<std::uint8_t>(bad.data() + 4, version);
    EXPECT_EQ(decode_header(bad, &h), Parse::kBadVersion) << int(version);
  }
  bad = f;
  bad[6] = std::byte{1};  // flags
  EXPECT_EQ(decode_header(bad, &h), Parse::kBadField);
  bad = f;
  bad[15] = std::byte{1};  // reserved
  EXPECT_EQ(decode_header(bad, &h), Parse::kBadField);
}

TEST(DoorFrames, BodiesRejectInconsistentLengthsReservedBytesAndBadFlags) {
  Credentials c{false, {}, 9, "worker"};
  auto f = frame_of(c);
  Credentials out;
  // The address length disagrees with the body: one more, one less, 0, the 16-bit maximum.
  for (std::uint16_t len : {7, 5, 0, 0xffff}) {
    auto bad = f;
    wire::put<std::uint16_t>(bad.data() + kFrameHeaderSize + 40, len);
    EXPECT_EQ(decode(body_of(bad), &out), Parse::kBadLength) << len;
  }
  auto bad = f;
  bad[kFrameHeaderSize + 32] = std::byte{2};  // has_proof is 0 or 1
  EXPECT_EQ(decode(body_of(bad), &out), Parse::kBadField);
  bad = f;
  bad[kFrameHeaderSize + 0] = std::byte{1};  // a proof's bytes without has_proof
  EXPECT_EQ(decode(body_of(bad), &out), Parse::kBadField);
  bad = f;
  wire::put<std::uint32_t>(bad.data() + kFrameHeaderSize + 36, wire::kUnassignedIndex);  // beyond 24 bits
  EXPECT_EQ(decode(body_of(bad), &out), Parse::kBadField);
  bad = f;
  bad[kFrameHeaderSize + 45] = std::byte{1};  // reserved
  EXPECT_EQ(decode(body_of(bad), &out), Parse::kBadField);
  bad = f;
  bad[kFrameHeaderSize + 34] = std::byte{1};  // reserved, after the link byte
  EXPECT_EQ(decode(body_of(bad), &out), Parse::kBadField);
  for (std::uint8_t link : {4, 0x80, 0xff}) {  // link: 0..3 (ACCEPT's Link; CLIENT_PROOF's two bits)
    bad = f;
    bad[kFrameHeaderSize + 33] = static_cast<std::byte>(link);
    EXPECT_EQ(decode(body_of(bad), &out), Parse::kBadField) << int(link);
  }
  for (std::uint8_t link : {0, 1, 2, 3}) {
    Credentials with_link{false, {}, 9, "worker", link};
    ASSERT_EQ(decode(body_of(frame_of(with_link)), &out), Parse::kOk);
    EXPECT_EQ(out.link, link);
  }

  std::vector<std::byte> r;
  encode(Refuse{1, "why"}, &r);
  Refuse ro;
  wire::put<std::uint16_t>(r.data() + kFrameHeaderSize + 2, 300);
  EXPECT_EQ(decode(body_of(r), &ro), Parse::kBadLength);

  std::vector<std::byte> s;
  encode(ServerHello{}, &s);
  ServerHello so;
  s[kFrameHeaderSize + 32] = std::byte{3};  // auth mode
  EXPECT_EQ(decode(body_of(s), &so), Parse::kBadField);
}

TEST(DoorProofs, AProofHoldsOnlyForItsNoncesKindSlotAndAddress) {
  auto key = Key::from_secret("0123456789abcdef-the-shared-secret");
  auto other = Key::from_secret("0123456789abcdef-another-secret!!");
  Nonce nc = random_nonce(), ns = random_nonce();
  Proof p = key->prove(ProofOf::kClient, nc, ns, 5, "address");
  EXPECT_TRUE(key->verify(p, ProofOf::kClient, nc, ns, 5, "address"));
  EXPECT_FALSE(other->verify(p, ProofOf::kClient, nc, ns, 5, "address")) << "another key";
  EXPECT_FALSE(key->verify(p, ProofOf::kClient, nc, random_nonce(), 5, "address"))
      << "a replayed proof meets a fresh server nonce";
  EXPECT_FALSE(key->verify(p, ProofOf::kClient, random_nonce(), ns, 5, "address"));
  EXPECT_FALSE(key->verify(p, ProofOf::kAccept, nc, ns, 5, "address")) << "a proof of another kind";
  EXPECT_FALSE(key->verify(p, ProofOf::kClient, nc, ns, 6, "address")) << "another index";
  EXPECT_FALSE(key->verify(p, ProofOf::kClient, nc, ns, 5, "addresS")) << "another worker address";
  EXPECT_NE(random_nonce(), random_nonce());
}

TEST(DoorProofs, AnAcceptsLinkIsCoveredSoEncryptionCannotBeTurnedOffInFlight) {
  auto key = Key::from_secret("0123456789abcdef-the-shared-secret");
  Nonce nc = random_nonce(), ns = random_nonce();
  auto aes = static_cast<std::uint8_t>(Link::kStreamAes);
  Proof p = key->prove(ProofOf::kAccept, nc, ns, 3, "address", aes);
  EXPECT_TRUE(key->verify(p, ProofOf::kAccept, nc, ns, 3, "address", aes));
  for (Link other : {Link::kUcx, Link::kStream, Link::kStreamChaCha})
    EXPECT_FALSE(key->verify(p, ProofOf::kAccept, nc, ns, 3, "address", static_cast<std::uint8_t>(other)))
        << static_cast<int>(other);
}

TEST(DoorProofs, ConnectionKeysDifferByDirectionAndConnection) {
  auto key = Key::from_secret("0123456789abcdef-the-shared-secret");
  auto other = Key::from_secret("0123456789abcdef-another-secret!!");
  Nonce nc = random_nonce(), ns = random_nonce();
  Key::SessionKeys k = key->session_keys(nc, ns);
  EXPECT_NE(k.client_to_server, k.server_to_client);
  EXPECT_EQ(key->session_keys(nc, ns).client_to_server, k.client_to_server) << "both ends derive the same";
  EXPECT_NE(key->session_keys(nc, random_nonce()).client_to_server, k.client_to_server) << "fresh per connection";
  EXPECT_NE(other->session_keys(nc, ns).client_to_server, k.client_to_server) << "only the key's holders";
}

class KeyFiles : public ::testing::Test {
 protected:
  std::string write(const std::string& content, ::mode_t mode) {
    std::string path = (std::filesystem::temp_directory_path() /
                        ("sluice_door_test_" + std::to_string(::getpid()) + "_" + std::to_string(files_.size())))
                           .string();
    std::ofstream(path) << content;
    ::chmod(path.c_str(), mode);
    files_.push_back(path);
    return path;
  }
  void TearDown() override {
    for (auto& f : files_) std::filesystem::remove(f);
  }
  std::vector<std::string> files_;
};

TEST_F(KeyFiles, ModeSizeAndTrailingWhiteSpace) {
  std::string secret = "a secret of some length";
  auto a = Key::load(write(secret, 0600), "SLUICE_AUTH_KEY_FILE");
  auto b = Key::load(write(secret + "\n\n", 0400), "SLUICE_AUTH_KEY_FILE");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  Nonce n = random_nonce();
  EXPECT_EQ((*a)->prove(ProofOf::kServerHello, n, n), (*b)->prove(ProofOf::kServerHello, n, n))
      << "a final newline is not part of the secret";
  for (::mode_t mode : {0640, 0604, 0660, 0606}) {
    auto k = Key::load(write(secret, mode), "SLUICE_AUTH_KEY_FILE");
    EXPECT_FALSE(k.ok()) << std::oct << mode;
    EXPECT_NE(k.status().message().find("chmod 600"), std::string::npos) << k.status();
  }
  EXPECT_FALSE(Key::load(write("fifteen bytes!!", 0600), "V").ok());
  EXPECT_FALSE(Key::load(write("fifteen bytes!!\n\n\n", 0600), "V").ok()) << "white space does not count";
  EXPECT_TRUE(Key::load(write("sixteen bytes!!!", 0600), "V").ok());
  EXPECT_FALSE(Key::load(write(std::string(4097, 'k'), 0600), "V").ok());
  auto missing = Key::load("/nonexistent/key", "SLUICE_AUTH_KEY_FILE");
  EXPECT_NE(missing.status().message().find("SLUICE_AUTH_KEY_FILE=/nonexistent/key"), std::string::npos);
}

TEST_F(KeyFiles, ANewKeyIsPrivateRandomAndNeverOverwritesAFile) {
  std::string path = write("", 0600);
  std::filesystem::remove(path);
  ASSERT_TRUE(write_new_key(path).ok());
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 65);
  EXPECT_TRUE(Key::load(path, "V").ok());
  EXPECT_FALSE(write_new_key(path).ok()) << "an existing file is left alone";
}

}  // namespace
}  // namespace sluice::detail::door
