// The bootstrap's key-value blobs and length-prefixed frames: round trips, and every malformed
// blob or frame refused with a clear error, never a crash or a read past the input.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "boot/kv.h"

namespace sluice::detail {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string u32(std::uint32_t v) {
  std::string out;
  put_u32(&out, v);
  return out;
}

// One key-value pair as encode_kv lays it out.
std::string pair(std::string_view k, std::string_view v) {
  return u32(static_cast<std::uint32_t>(k.size())) + std::string(k) + u32(static_cast<std::uint32_t>(v.size())) +
         std::string(v);
}

TEST(Kv, U32IsLittleEndianAndNeedsFourBytes) {
  EXPECT_EQ(u32(0x04030201), std::string("\x01\x02\x03\x04", 4));
  std::string three("\xff\xff\xff", 3);
  std::string_view in = three;
  std::uint32_t v = 7;
  EXPECT_FALSE(get_u32(&in, &v));
  EXPECT_EQ(in.size(), 3u);  // nothing consumed
  std::string four = u32(UINT32_MAX) + "x";
  in = four;
  ASSERT_TRUE(get_u32(&in, &v));
  EXPECT_EQ(v, UINT32_MAX);
  EXPECT_EQ(in, "x");
}

TEST(Kv, RoundTripsEmptyBinaryAndLargeMaps) {
  std::string binary;
  for (int i = 0; i < 256; ++i) binary.push_back(static_cast<char>(i));
  const KvMap maps[] = {
      {},
      {{"", ""}},
      {{"", "value of the empty key"}, {"empty value", ""}},
      {{binary, binary}, {std::string("\0\n", 2), std::string("\n\0 FENCE", 8)}},
      {{"large", std::string(std::size_t{3} << 20, 'L')}, {"small", "s"}},
  };
  for (const KvMap& kv : maps) {
    std::string blob = encode_kv(kv);
    auto back = decode_kv(blob);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, kv);
  }
  EXPECT_EQ(encode_kv({}), "");
  EXPECT_EQ(encode_kv({{"k", "vv"}}), pair("k", "vv"));
}

// Each prefix of a valid blob that cuts an entry is refused; one that ends between entries
// decodes to the entries before the cut.
TEST(Kv, EveryTruncationIsRefusedOrEndsBetweenEntries) {
  KvMap kv{{"a", "1"}, {"bb", ""}, {"ccc", "333"}};
  std::string blob = encode_kv(kv);
  std::size_t boundaries[] = {0, pair("a", "1").size(), pair("a", "1").size() + pair("bb", "").size(), blob.size()};
  for (std::size_t n = 0; n <= blob.size(); ++n) {
    // A copy of exactly n bytes: ASan sees any read past it.
    std::string cut = blob.substr(0, n);
    auto got = decode_kv(cut);
    bool boundary = std::find(std::begin(boundaries), std::end(boundaries), n) != std::end(boundaries);
    if (boundary) {
      EXPECT_TRUE(got.ok()) << n << ": " << got.status();
    } else {
      EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << n;
      EXPECT_THAT(std::string(got.status().message()), HasSubstr("bootstrap blob")) << n;
    }
  }
}

TEST(Kv, MalformedBlobsAreRefusedNamingWhatIsWrong) {
  struct Case {
    std::string blob;
    const char* says;
  } cases[] = {
      {std::string("\x01\x00\x00", 3), "key length"},               // a length cut short
      {u32(5) + "ab", "key length 5"},                              // a key beyond the blob
      {u32(1) + "k" + std::string("\x01\x00", 2), "value length"},  // its value's length cut short
      {u32(1) + "k" + u32(9) + "12345678", "value length 9"},       // a value one byte beyond
      {u32(UINT32_MAX), "key length 4294967295"},
      {u32(UINT32_MAX) + std::string(64, 'x'), "key length 4294967295"},
      {u32(1) + "k" + u32(UINT32_MAX) + "v", "value length 4294967295"},
      {pair("k", "v") + "\x01", "key length"},             // one trailing byte
      {pair("k", "v") + u32(0), "value length"},           // a trailing empty key without its value
      {pair("k", "v") + u32(2) + "k", "key length 2"},     // a trailing entry cut short
      {pair("k", "1") + pair("k", "2"), "key 'k' twice"},  // encode_kv never writes a key twice
  };
  for (const Case& c : cases) {
    auto got = decode_kv(c.blob);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << c.says;
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(c.says));
  }
}

// A connected pair of stream sockets, closed at the end.
struct SocketPair {
  int fd[2] = {-1, -1};
  SocketPair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd), 0); }
  ~SocketPair() {
    for (int f : fd)
      if (f >= 0) ::close(f);
  }
  void close_writer() {
    ::close(fd[0]);
    fd[0] = -1;
  }
  void send_raw(std::string_view bytes) const {
    ASSERT_EQ(::send(fd[0], bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
  }
};

TEST(Frame, RoundTripsEmptySmallAndLimitSizedBodies) {
  for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{70000}, kMaxBootMessage}) {
    SocketPair sp;
    std::string body(size, '\0');
    for (std::size_t i = 0; i < size; ++i) body[i] = static_cast<char>(i * 7);
    // A writer of its own: a large frame does not fit in the socket's buffer.
    absl::Status wrote;
    std::thread writer([&] { wrote = write_frame(sp.fd[0], body); });
    auto got = read_frame(sp.fd[1], 10000);
    writer.join();
    ASSERT_TRUE(wrote.ok()) << wrote;
    ASSERT_TRUE(got.ok()) << size << ": " << got.status();
    EXPECT_TRUE(*got == body) << size;
  }
}

TEST(Frame, ABodyAboveTheLimitIsRefusedBeforeAByteIsSent) {
  SocketPair sp;
  // Non-blocking: a writer that sent anyway fails on the full socket instead of waiting.
  ASSERT_EQ(::fcntl(sp.fd[0], F_SETFL, ::fcntl(sp.fd[0], F_GETFL) | O_NONBLOCK), 0);
  std::string body(kMaxBootMessage + 1, 'x');
  absl::Status st = write_frame(sp.fd[0], body);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr(std::to_string(kMaxBootMessage + 1) + " bytes is too large"));
  // Nothing went: the connection still carries whole frames.
  auto nothing = read_frame(sp.fd[1], 50);
  EXPECT_EQ(nothing.status().code(), absl::StatusCode::kDeadlineExceeded) << nothing.status();
  ASSERT_TRUE(write_frame(sp.fd[0], "next").ok());
  auto next = read_frame(sp.fd[1], 1000);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, "next");
}

TEST(Frame, TwoFramesInOneWriteAreReadOneByOne) {
  SocketPair sp;
  sp.send_raw(u32(3) + "one" + u32(0) + u32(5) + "three");
  for (const char* want : {"one", "", "three"}) {
    auto got = read_frame(sp.fd[1], 1000);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, want);
  }
}

TEST(Frame, ALengthAboveTheLimitIsRefusedBeforeItsBody) {
  for (std::uint32_t len : {static_cast<std::uint32_t>(kMaxBootMessage + 1), UINT32_MAX}) {
    SocketPair sp;
    sp.send_raw(u32(len) + "a few bytes of body");
    auto got = read_frame(sp.fd[1], 10000);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << len;
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(std::to_string(len) + " bytes is too large"));
  }
}

TEST(Frame, APeerThatClosesMidFrameIsAnError) {
  for (const std::string& sent : {std::string("\x10\x00", 2), u32(100) + std::string(10, 'x')}) {
    SocketPair sp;
    sp.send_raw(sent);
    sp.close_writer();
    auto got = read_frame(sp.fd[1], 10000);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << sent.size();
    EXPECT_THAT(std::string(got.status().message()), HasSubstr("closed the connection"));
  }
}

TEST(Frame, AReadThatWaitsTooLongTimesOut) {
  for (const std::string& sent : {std::string(), std::string("\x10", 1), u32(100) + std::string(10, 'x')}) {
    SocketPair sp;
    if (!sent.empty()) sp.send_raw(sent);
    auto got = read_frame(sp.fd[1], 50);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << sent.size();
    EXPECT_THAT(std::string(got.status().message()), HasSubstr("did not come in time"));
  }
}

TEST(Frame, WritingToAClosedPeerIsAnErrorNotASignal) {
  SocketPair sp;
  ::close(sp.fd[1]);
  sp.fd[1] = -1;
  absl::Status st = write_frame(sp.fd[0], "hello");
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(st.message()), StartsWith("bootstrap write: "));
}

}  // namespace
}  // namespace sluice::detail
