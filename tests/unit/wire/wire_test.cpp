// Wire format: round trips, and a parser that refuses every malformed input with a reason.
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "wire/wire.h"

namespace sluice::detail::wire {
namespace {

std::vector<std::byte> message(const Header& h, std::size_t uh, std::size_t inl) {
  std::vector<std::byte> b(kHeaderSize + uh + inl, std::byte{0x77});
  encode(h, b.data());
  return b;
}

TEST(Tag, RoundTrips) {
  std::uint64_t t = make_tag(kRndv, 0xabcdef, 0x123456789);
  EXPECT_EQ(tag_class(t), kRndv);
  EXPECT_EQ(tag_index(t), 0xabcdefu);
  EXPECT_EQ(tag_id(t), 0x123456789u);
  // Ids wrap at 36 bits instead of spilling into the index.
  std::uint64_t w = make_tag(kEager, 5, (std::uint64_t{1} << 36) + 3);
  EXPECT_EQ(tag_index(w), 5u);
  EXPECT_EQ(tag_id(w), 3u);
}

TEST(Tag, ClassMaskFindsControlClassOnly) {
  // First contact is found by probing for the CTRL class under kClassMask.
  auto matches = [](std::uint64_t tag) { return ((tag ^ make_tag(kCtrl, 0, 0)) & kClassMask) == 0; };
  EXPECT_TRUE(matches(make_tag(kCtrl, 3, 9)));
  EXPECT_TRUE(matches(make_tag(kCtrl, kUnassignedIndex, 0)));
  EXPECT_FALSE(matches(make_tag(kEager, 3, 9)));
  EXPECT_FALSE(matches(make_tag(kRndv, 3, 9)));
  EXPECT_FALSE(matches(make_tag(kReply, 3, 9)));
  EXPECT_FALSE(matches(make_tag(static_cast<TagClass>(7), 3, 9))) << "the whole class, not one bit of it";
}

TEST(Header, RoundTrips) {
  Header h{kFlagRequest | kFlagReplyBuf, 77, 12, 100, 5, 3, 0xfffffffffffffff0ULL, 41, 9001, 1 << 20};
  auto b = message(h, 12, 100);
  Header out;
  ASSERT_EQ(decode(b, &out), Parse::kOk);
  EXPECT_EQ(out, h);
}

TEST(Header, PatchesRewriteInPlace) {
  Header h{};
  auto b = message(h, 0, 0);
  patch_seq(b.data(), 99);
  patch_piggyback(b.data(), 7, 42);
  Header out;
  ASSERT_EQ(decode(b, &out), Parse::kOk);
  EXPECT_EQ(out.seq, 99u);
  EXPECT_EQ(out.credits, 7u);
  EXPECT_EQ(out.ack, 42u);
}

TEST(Header, RejectsShortBadMagicBadVersion) {
  Header h{};
  auto b = message(h, 0, 0);
  Header out;
  EXPECT_EQ(decode(std::span(b).first(kHeaderSize - 1), &out), Parse::kTooShort);
  EXPECT_EQ(decode({}, &out), Parse::kTooShort);
  auto bad = b;
  bad[0] = std::byte{0};
  EXPECT_EQ(decode(bad, &out), Parse::kBadMagic);
  bad = b;
  bad[2] = std::byte{kVersion + 1};
  EXPECT_EQ(decode(bad, &out), Parse::kBadVersion);
}

TEST(Header, RejectsLengthsThatDisagreeWithTheBytes) {
  Header out;
  Header h{};
  h.user_header_len = 10;
  h.payload_len = 20;
  EXPECT_EQ(decode(message(h, 10, 20), &out), Parse::kOk);
  EXPECT_EQ(decode(message(h, 10, 19), &out), Parse::kBadLength);
  EXPECT_EQ(decode(message(h, 10, 21), &out), Parse::kBadLength);
  h.payload_len = 0xffffffff;  // a claimed 4 GiB is just a number that does not match
  EXPECT_EQ(decode(message(h, 10, 20), &out), Parse::kBadLength);
  h.user_header_len = 0xffff;
  EXPECT_EQ(decode(message(h, 10, 20), &out), Parse::kBadLength);
  Header r{};
  r.flags = kFlagRndv;
  r.payload_len = 0;
  EXPECT_EQ(decode(message(r, 0, 0), &out), Parse::kBadLength);
  r.payload_len = 1 << 30;  // rendezvous: nothing inline
  EXPECT_EQ(decode(message(r, 0, 0), &out), Parse::kOk);
  EXPECT_EQ(decode(message(r, 0, 1), &out), Parse::kBadLength);
}

TEST(Header, FragmentsMustFitTheirPayload) {
  Header out;
  Header f{};
  f.flags = kFlagFrag;
  f.payload_len = 100;
  f.aux = 90;
  EXPECT_EQ(decode(message(f, 0, 10), &out), Parse::kOk);
  EXPECT_EQ(decode(message(f, 0, 11), &out), Parse::kBadLength);
  f.aux = 101;
  EXPECT_EQ(decode(message(f, 0, 1), &out), Parse::kBadLength);
  f.aux = 0;
  EXPECT_EQ(decode(message(f, 0, 0), &out), Parse::kBadLength);
}

TEST(Header, RejectsUnknownAndContradictoryFlags) {
  Header out;
  for (std::uint8_t flags : {std::uint8_t{kFlagRequest | kFlagReply}, std::uint8_t{kFlagCtrl | kFlagRndv},
                             std::uint8_t{kFlagFrag | kFlagRndv}}) {
    Header h{};
    h.flags = flags;
    h.payload_len = 8;
    EXPECT_EQ(decode(message(h, 0, flags & kFlagRndv ? 0 : 8), &out), Parse::kBadFlags) << int(flags);
  }
}

// A compact message: its header, `uh` bytes of user header, `inl` of payload.
std::vector<std::byte> compact(std::uint8_t flags, std::uint16_t handler, std::size_t uh, std::size_t inl,
                               std::uint16_t credits, std::uint16_t status, std::uint64_t seq, std::uint64_t rpc_id) {
  std::vector<std::byte> b(compact_size(flags) + uh + inl, std::byte{0x77});
  std::size_t hs =
      encode_compact(flags, handler, static_cast<std::uint16_t>(uh), credits, status, seq, rpc_id, b.data());
  EXPECT_EQ(hs, compact_size(flags));
  return b;
}

TEST(Compact, RoundTripsPlainRequestAndReply) {
  Header out;
  auto plain = compact(0, 7, 3, 5, 2, 0, 0x1234567890ULL, 0);
  EXPECT_EQ(plain.size(), kCompactHeaderSize + 8);
  ASSERT_EQ(decode(plain, &out), Parse::kOk);
  EXPECT_EQ(out.flags, kFlagCompact);
  EXPECT_EQ(out.handler, 7u);
  EXPECT_EQ(out.user_header_len, 3u);
  EXPECT_EQ(out.payload_len, 5u);
  EXPECT_EQ(out.credits, 2u);
  EXPECT_EQ(out.seq, 0x34567890u);  // the low 32 bits; the receiver extends them
  EXPECT_EQ(header_size(out), kCompactHeaderSize);
  EXPECT_EQ(inline_payload(out, plain.size()), 5u);

  // An RPC's header is 20 bytes: an 8-byte call fits the first 64-byte line of UCX's
  // shared-memory FIFO element after UCX's 36 bytes (docs/performance.md).
  auto request = compact(kFlagRequest, 9, 0, 8, 0, 0, 4, 0xfacecafebeefULL);
  EXPECT_EQ(request.size(), std::size_t{20 + 8});
  ASSERT_EQ(decode(request, &out), Parse::kOk);
  EXPECT_EQ(out.flags, kFlagCompact | kFlagRequest);
  EXPECT_EQ(out.handler, 9u);
  EXPECT_EQ(out.rpc_id, 0xfacecafebeefULL);
  EXPECT_EQ(out.status, 0u);
  EXPECT_EQ(out.payload_len, 8u);
  EXPECT_EQ(header_size(out), std::size_t{20});

  // A reply carries its status where a request has its method (the caller knows that).
  auto reply = compact(kFlagReply, 9, 0, 0, 1, 13, 5, 0xffffffffffffULL);
  EXPECT_EQ(reply.size(), std::size_t{20});
  ASSERT_EQ(decode(reply, &out), Parse::kOk);
  EXPECT_EQ(out.flags, kFlagCompact | kFlagReply);
  EXPECT_EQ(out.status, 13u);
  EXPECT_EQ(out.handler, 0u);
  EXPECT_EQ(out.rpc_id, 0xffffffffffffULL);
  EXPECT_EQ(out.payload_len, 0u);
}

TEST(Compact, TakesRpcIdsOf48BitsOnly) {
  EXPECT_TRUE(compactable(kFlagRequest, (std::uint64_t{1} << kCompactIdBits) - 1));
  EXPECT_TRUE(compactable(kFlagReply, 1));
  EXPECT_FALSE(compactable(kFlagRequest, std::uint64_t{1} << kCompactIdBits));
  EXPECT_FALSE(compactable(kFlagReply, ~std::uint64_t{0}));
  EXPECT_FALSE(compactable(kFlagRequest | kFlagReplyBuf, 1));
}

TEST(Compact, RejectsWhatTheFormCannotCarry) {
  Header out;
  // Shorter than its header: 16 bytes, 20 with an rpc id.
  auto plain = compact(0, 1, 0, 0, 0, 0, 1, 0);
  EXPECT_EQ(decode(std::span(plain).first(kCompactHeaderSize - 1), &out), Parse::kTooShort);
  auto request = compact(kFlagRequest, 1, 0, 0, 0, 0, 1, 2);
  EXPECT_EQ(decode(std::span(request).first(kCompactHeaderSize + 3), &out), Parse::kTooShort);
  // A user header longer than the bytes after the header.
  auto b = compact(0, 1, 4, 0, 0, 0, 1, 0);
  EXPECT_EQ(decode(std::span(b).first(b.size() - 1), &out), Parse::kBadLength);
  // Any flag but REQUEST or REPLY, or both of them.
  for (std::uint8_t f : {std::uint8_t{kFlagRndv}, std::uint8_t{kFlagReplyBuf}, std::uint8_t{kFlagCtrl},
                         std::uint8_t{kFlagFrag}, std::uint8_t{kFlagMore}, std::uint8_t{kFlagRequest | kFlagReply}}) {
    auto c = compact(0, 1, 0, 32, 0, 0, 1, 0);
    c[3] = static_cast<std::byte>(kFlagCompact | f);
    EXPECT_EQ(decode(c, &out), Parse::kBadFlags) << int(f);
  }
  // A status on a plain message (a request has none: those bytes are its id's).
  auto s = compact(0, 1, 0, 0, 0, 0, 1, 0);
  s[10] = std::byte{1};
  EXPECT_EQ(decode(s, &out), Parse::kBadFlags);
  // Magic and version are checked as in the full form.
  auto m = compact(0, 1, 0, 0, 0, 0, 1, 0);
  m[0] = std::byte{0};
  EXPECT_EQ(decode(m, &out), Parse::kBadMagic);
  m = compact(0, 1, 0, 0, 0, 0, 1, 0);
  m[2] = std::byte{kVersion - 1};
  EXPECT_EQ(decode(m, &out), Parse::kBadVersion);
  // The full form refuses the compact flag.
  Header h{};
  h.flags = kFlagCompact;
  EXPECT_EQ(decode_full(message(h, 0, 0), &out), Parse::kBadFlags);
}

TEST(Compact, SequenceExtendsToTheNearestOfTheExpected) {
  EXPECT_EQ(extend_seq(1, 1), 1u);
  EXPECT_EQ(extend_seq(10, 12), 12u);  // early
  EXPECT_EQ(extend_seq(10, 7), 7u);    // stale
  // Across a 32-bit boundary, both ways.
  std::uint64_t e = (std::uint64_t{5} << 32) + 0xfffffff0u;
  EXPECT_EQ(extend_seq(e, 0x00000004u), (std::uint64_t{6} << 32) + 4);
  e = (std::uint64_t{6} << 32) + 3;
  EXPECT_EQ(extend_seq(e, 0xfffffffeu), (std::uint64_t{5} << 32) + 0xfffffffeu);
}

// Builds one tagged message from `parts` the way the sender coalesces them: MORE on all but
// the last, each at an 8-byte boundary.
std::vector<std::byte> coalesce(std::vector<std::pair<Header, std::size_t>> parts) {
  std::vector<std::byte> out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    Header h = parts[i].first;
    if (i + 1 < parts.size()) h.flags |= kFlagMore;
    out.resize((out.size() + 7) / 8 * 8);
    auto m = message(h, h.user_header_len, parts[i].second);
    out.insert(out.end(), m.begin(), m.end());
  }
  return out;
}

TEST(Coalesced, WalksEveryMessageInOrder) {
  std::vector<std::pair<Header, std::size_t>> parts;
  for (std::uint32_t i = 0; i < 5; ++i) {
    Header h{};
    h.seq = 100 + i;
    h.user_header_len = static_cast<std::uint16_t>(i);
    h.payload_len = 3 * i + 1;
    parts.push_back({h, h.payload_len});
  }
  auto bytes = coalesce(parts);
  std::vector<std::uint64_t> seqs;
  std::vector<std::size_t> sizes;
  EXPECT_EQ(for_each_message(bytes,
                             [&](const Header& h, std::span<const std::byte> m) {
                               seqs.push_back(h.seq);
                               sizes.push_back(m.size());
                               return true;
                             }),
            Parse::kOk);
  EXPECT_EQ(seqs, (std::vector<std::uint64_t>{100, 101, 102, 103, 104}));
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(sizes[i], kHeaderSize + 4 * i + 1);
  // A single message is a walk of one.
  seqs.clear();
  EXPECT_EQ(for_each_message(message(parts[0].first, 0, 1),
                             [&](const Header& h, std::span<const std::byte>) {
                               seqs.push_back(h.seq);
                               return true;
                             }),
            Parse::kOk);
  EXPECT_EQ(seqs.size(), 1u);
}

TEST(Coalesced, RejectsWhatCannotBeCoalescedOrDoesNotFit) {
  Header out;
  Header h{};
  h.flags = kFlagMore;
  h.payload_len = 8;
  // MORE with nothing after it: the next header must fit in the bytes.
  EXPECT_EQ(decode(message(h, 0, 8), &out), Parse::kBadLength);
  // A claimed length that runs past the bytes.
  Header big = h;
  big.payload_len = 1 << 20;
  EXPECT_EQ(decode(message(big, 0, 8 + kHeaderSize), &out), Parse::kBadLength);
  // Control, rendezvous and fragment messages are never coalesced.
  for (std::uint8_t f : {std::uint8_t{kFlagCtrl}, std::uint8_t{kFlagRndv}, std::uint8_t{kFlagFrag}}) {
    Header c = h;
    c.flags = static_cast<std::uint8_t>(kFlagMore | f);
    EXPECT_EQ(decode(message(c, 0, 8 + kHeaderSize), &out), Parse::kBadFlags) << int(f);
  }
  // A bad message in the middle stops the walk there: the ones before it were seen.
  Header a{}, b{};
  a.payload_len = b.payload_len = 4;
  auto bytes = coalesce({{a, 4}, {b, 4}, {a, 4}});
  std::size_t second = ((kHeaderSize + 4) + 7) / 8 * 8;
  bytes[second] = std::byte{0};  // the second one's magic
  int seen = 0;
  EXPECT_EQ(for_each_message(bytes, [&](const Header&, std::span<const std::byte>) { return ++seen, true; }),
            Parse::kBadMagic);
  EXPECT_EQ(seen, 1);
  // The last message must end exactly where the bytes end.
  bytes = coalesce({{a, 4}, {b, 4}});
  bytes.push_back(std::byte{0});
  EXPECT_EQ(for_each_message(bytes, [&](const Header&, std::span<const std::byte>) { return true; }),
            Parse::kBadLength);
}

TEST(Grant, RoundTripsAndRefusesATargetBelowTheFloor) {
  Grant g{0x1'0000'0002ULL, 77, 2, 0xffffffffu, 1, 0, 5};
  std::vector<std::byte> b(kGrantSize);
  encode_grant(g, b.data());
  Grant out;
  EXPECT_EQ(decode_grant(b, &out), Parse::kOk);
  EXPECT_EQ(out, g);
  EXPECT_EQ(decode_grant(std::span(b).first(kGrantSize - 1), &out), Parse::kBadLength);
  g.target = 1;
  encode_grant(g, b.data());
  EXPECT_EQ(decode_grant(b, &out), Parse::kBadField) << "no peer keeps fewer than 2 credits";
  g.target = 2;
  g.lent = 1;
  encode_grant(g, b.data());
  EXPECT_EQ(decode_grant(b, &out), Parse::kBadField) << "no HELLO grants fewer than 2";
  g.lent = 2;
  g.window = 0;
  encode_grant(g, b.data());
  EXPECT_EQ(decode_grant(b, &out), Parse::kBadField) << "no window below 1 call";
  g.window = 1;
  encode_grant(g, b.data());
  b[36] = std::byte{1};
  EXPECT_EQ(decode_grant(b, &out), Parse::kBadField) << "the reserved word is 0";
}

TEST(Hello, RoundTripsAndChecksItsSize) {
  Hello h{3, 1, 8192, 32, 16, 3, 0xdeadbeefcafef00dULL, kIdMask};
  std::vector<std::byte> b(kHelloSize);
  encode_hello(h, b.data());
  Hello out;
  ASSERT_EQ(decode_hello(b, &out), Parse::kOk);
  EXPECT_EQ(out, h);
  EXPECT_EQ(decode_hello(std::span(b).first(kHelloSize - 1), &out), Parse::kBadLength);
}

TEST(Hello, AReceiveKeyOutsideTheTagsIdBitsIsRejected) {
  // The key goes into every EAGER tag's 36 id bits: 0 (never given) and wider keys are refused.
  for (std::uint64_t key : {std::uint64_t{0}, kIdMask + 1}) {
    Hello h{3, 1, 8192, 32, 16, 3, 1, key};
    std::vector<std::byte> b(kHelloSize);
    encode_hello(h, b.data());
    Hello out;
    EXPECT_EQ(decode_hello(b, &out), Parse::kBadField) << key;
  }
}

// Re-encodes a decoded header in the form it came in, over a copy of the message.
std::vector<std::byte> reencode(const Header& h, std::span<const std::byte> bytes) {
  std::vector<std::byte> again(bytes.begin(), bytes.end());
  EXPECT_EQ(encode_as_decoded(h, again.data()), header_size(h));
  return again;
}

// Random mutations of valid messages of both forms, seeded: the parser never reads out of
// bounds (ASan in the sanitizer build), and whatever it accepts re-encodes to the same bytes
// and decodes again to the same header.
TEST(Header, SurvivesSeededMutations) {
  std::mt19937_64 rng(20261129);
  std::printf("seed 20261129\n");
  int accepted[2] = {0, 0};
  for (int i = 0; i < 200000; ++i) {
    bool small = (i % 2) == 1;
    auto uh = static_cast<std::uint16_t>(rng() % 64);
    std::size_t len = (small ? kCompactHeaderSize + 8 : kHeaderSize) + rng() % 256;
    std::vector<std::byte> b(len);
    for (auto& x : b) x = static_cast<std::byte>(rng());
    if (small) {
      static constexpr std::uint8_t kForms[] = {0, kFlagRequest, kFlagReply};
      encode_compact(kForms[rng() % 3], 1, uh, 2, 0, rng(), rng(), b.data());
    } else {
      Header h{};
      h.flags = static_cast<std::uint8_t>(rng() & 0x3f);
      h.user_header_len = uh;
      h.payload_len = static_cast<std::uint32_t>(rng() % 128);
      encode(h, b.data());
    }
    for (int m = 0; m < 3; ++m) b[rng() % len] = static_cast<std::byte>(rng());
    Header out;
    if (decode(b, &out) != Parse::kOk) continue;
    ++accepted[(out.flags & kFlagCompact) ? 1 : 0];
    auto again = reencode(out, b);
    ASSERT_EQ(std::memcmp(again.data(), b.data(), header_size(out)), 0) << "iteration " << i;
    Header twice;
    ASSERT_EQ(decode(again, &twice), Parse::kOk);
    EXPECT_EQ(twice, out);
  }
  // Both forms were exercised past the parser, not only refused.
  EXPECT_GT(accepted[0], 100);
  EXPECT_GT(accepted[1], 100);
}

}  // namespace
}  // namespace sluice::detail::wire
