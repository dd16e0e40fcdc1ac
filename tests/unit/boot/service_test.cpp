// sluice-run's bootstrap service in-process: fences of real ranks (the sluice-run bootstrap's
// client) over its Unix socket and TCP loopback, and malformed or unauthorised requests
// refused with a clear ERR while the legitimate ranks are still served.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sluice/bootstrap_service.h>

#include "boot/kv.h"
#include "boot/make_bootstrap.h"

namespace sluice::detail {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// The service driven as sluice-run drives it: poll its fds, then handle(), on a thread of its own.
class RunningService {
 public:
  explicit RunningService(int size) : service_(BootstrapService::create(size).value()) {}
  ~RunningService() { stop(); }
  void start() {
    thread_ = std::thread([this] {
      while (!stop_) {
        std::vector<pollfd> p;
        for (int fd : service_->fds()) p.push_back({fd, POLLIN, 0});
        ::poll(p.data(), p.size(), 10);
        service_->handle();
      }
    });
  }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  BootstrapService& service() { return *service_; }
  // Counters are the driving thread's: read once it has stopped.
  int rejected() {
    stop();
    return service_->rejected();
  }
  int closed_unserved() {
    stop();
    return service_->closed_unserved();
  }

 private:
  std::unique_ptr<BootstrapService> service_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::unique_ptr<Bootstrap> rank_client(const std::string& addr, const std::string& token, int rank, int size) {
  Config c;
  c.boot = "sluice-run";
  c.connect_timeout = std::chrono::seconds(20);
  ProcessEnv env;
  env.rank = rank;
  env.size = size;
  env.boot_addr = addr;
  env.boot_token = token;
  return make_bootstrap(c, env).value();
}

// Ranks 0 .. size - 1 of a job, as sluice-run starts them.
std::vector<std::unique_ptr<Bootstrap>> job(const std::string& addr, const std::string& token, int size) {
  std::vector<std::unique_ptr<Bootstrap>> ranks;
  ranks.reserve(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) ranks.push_back(rank_client(addr, token, r, size));
  return ranks;
}

std::vector<absl::Status> fence_all(const std::vector<std::unique_ptr<Bootstrap>>& ranks) {
  std::vector<absl::Status> st(ranks.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < ranks.size(); ++i) threads.emplace_back([&, i] { st[i] = ranks[i]->fence(); });
  for (auto& t : threads) t.join();
  return st;
}

std::string frame(std::string_view body) {
  std::string out;
  put_u32(&out, static_cast<std::uint32_t>(body.size()));
  return out + std::string(body);
}

int connect_unix(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path, path.data(), path.size());
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0) << std::strerror(errno);
  return fd;
}

// Sends `bytes` on a fresh connection and returns the service's reply; then the service must
// have closed the connection (what a rejected request gets).
std::string ask_rejected(const std::string& addr, std::string_view bytes) {
  int fd = connect_unix(addr);
  EXPECT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
  auto reply = read_frame(fd, 10000);
  auto after = read_frame(fd, 10000);
  ::close(fd);
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable) << "the connection was not closed";
  return reply.ok() ? *reply : std::string(reply.status().message());
}

TEST(BootstrapService, ThreeRanksFenceTwiceOverItsUnixSocket) {
  RunningService s(3);
  s.start();
  auto ranks = job(s.service().address(), s.service().token(), 3);
  const std::string binary("\0\n\xff FENCE 0 1\n", 14);
  const std::string large(std::size_t{1} << 20, 'L');  // more than one read of the service
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(ranks[r]->put("addr", "rank-" + std::to_string(r)).ok());
    ASSERT_TRUE(ranks[r]->put("bin", binary + std::to_string(r)).ok());
  }
  ASSERT_TRUE(ranks[2]->put("large", large).ok());
  for (const absl::Status& st : fence_all(ranks)) ASSERT_TRUE(st.ok()) << st;
  for (int r = 0; r < 3; ++r) {
    for (int from = 0; from < 3; ++from) {
      EXPECT_EQ(ranks[r]->get(from, "addr").value_or("?"), "rank-" + std::to_string(from));
      EXPECT_EQ(ranks[r]->get(from, "bin").value_or("?"), binary + std::to_string(from));
    }
    EXPECT_TRUE(ranks[r]->get(2, "large").value_or("?") == large);
    EXPECT_EQ(ranks[r]->get(0, "large").status().code(), absl::StatusCode::kNotFound);
  }
  // A second fence (epoch 2) carries what was put since.
  ASSERT_TRUE(ranks[1]->put("later", "yes").ok());
  for (const absl::Status& st : fence_all(ranks)) ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(ranks[0]->get(1, "later").value_or("?"), "yes");
  EXPECT_EQ(s.rejected(), 0);
}

TEST(BootstrapService, TwoRanksFenceOverTcpLoopback) {
  RunningService s(2);
  auto port = s.service().listen_tcp("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status();
  s.start();
  std::string addr = "tcp:127.0.0.1:" + std::to_string(*port);
  auto ranks = job(addr, s.service().token(), 2);
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(ranks[r]->put("who", std::to_string(r)).ok());
  for (const absl::Status& st : fence_all(ranks)) ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(ranks[0]->get(1, "who").value_or("?"), "1");
  EXPECT_EQ(ranks[1]->get(0, "who").value_or("?"), "0");
}

TEST(BootstrapService, AWrongTokenIsRefusedAndTheJobGoesOn) {
  RunningService s(2);
  s.start();
  const std::string& token = s.service().token();
  std::string wrong = token;
  wrong[0] = wrong[0] == '0' ? '1' : '0';
  auto impostor = rank_client(s.service().address(), wrong, 0, 2);
  absl::Status st = impostor->fence();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(st.message()), HasSubstr("sluice-run refused fence 1: ERR wrong token"));
  EXPECT_THAT(ask_rejected(s.service().address(), frame(token.substr(1) + " FENCE 0 1\n")), "ERR wrong token\n");
  auto ranks = job(s.service().address(), token, 2);
  for (const absl::Status& f : fence_all(ranks)) EXPECT_TRUE(f.ok()) << f;
  EXPECT_EQ(s.rejected(), 2);
}

// Rank 0 waits in its fence while requests that carry the token but are malformed arrive; each
// gets an ERR naming what is wrong, and rank 1's fence then completes rank 0's.
TEST(BootstrapService, MalformedRequestsGetAClearErrAndTheRanksAreStillServed) {
  RunningService s(2);
  s.start();
  const std::string& token = s.service().token();
  const std::string& addr = s.service().address();
  auto ranks = job(addr, token, 2);
  ASSERT_TRUE(ranks[0]->put("k", "zero").ok());
  absl::Status first;
  std::thread rank0([&] { first = ranks[0]->fence(); });
  std::string bad_blob;
  put_u32(&bad_blob, 5);
  std::string huge;
  put_u32(&huge, UINT32_MAX);
  struct Case {
    std::string bytes;
    std::string err;
  } cases[] = {
      {frame(token + " FENCE x 1\n"), "ERR rank 'x' is not in [0, 2)\n"},
      {frame(token + " FENCE 2 1\n"), "ERR rank '2' is not in [0, 2)\n"},
      {frame(token + " FENCE -1 1\n"), "ERR rank '-1' is not in [0, 2)\n"},
      // 2^32 + 1: not rank 1 by way of an overflow
      {frame(token + " FENCE 4294967297 1\n"), "ERR rank '4294967297' is not in [0, 2)\n"},
      {frame(token + " FENCE 1 2\n"), "ERR rank 1 sent fence 2, expected 1\n"},
      {frame(token + " FENCE 1 0\n"), "ERR rank 1 sent fence 0, expected 1\n"},
      {frame(token + " FENCE 1 4294967297\n"), "ERR fence '4294967297' is not a number\n"},
      {frame(token + " FENCE 1 one\n"), "ERR fence 'one' is not a number\n"},
      {frame(token + " PUT 1 1\n"), "ERR unknown request 'PUT'\n"},
      {frame(token + " FENCE 1\n"), "ERR malformed request\n"},
      {frame(token + " FENCE 1 1 extra\n"), "ERR malformed request\n"},
      {frame(token + "  FENCE 1 1\n"), "ERR malformed request\n"},
      {frame(token + " FENCE 1 1\n" + bad_blob + "ab"),
       "ERR malformed key-value blob: bootstrap blob: key length 5 at byte 0 runs past its end (2 bytes left)\n"},
      {huge + token + " FENCE 1 1\n", "ERR frame length above the limit\n"},
      {frame(std::string(300, 'x')), "ERR no request line in the first 256 bytes\n"},
      {frame(token).substr(0, 4) + token + " FENCE 1 1\n", "ERR malformed request\n"},  // its line beyond its frame
  };
  for (const Case& c : cases) EXPECT_EQ(ask_rejected(addr, c.bytes), c.err);
  ASSERT_TRUE(ranks[1]->put("k", "one").ok());
  absl::Status second = ranks[1]->fence();
  rank0.join();
  ASSERT_TRUE(first.ok()) << first;
  ASSERT_TRUE(second.ok()) << second;
  EXPECT_EQ(ranks[0]->get(1, "k").value_or("?"), "one");
  EXPECT_EQ(ranks[1]->get(0, "k").value_or("?"), "zero");
  EXPECT_EQ(s.rejected(), static_cast<int>(std::size(cases)));
}

// A request that trickles in a byte at a time is read whole and served.
TEST(BootstrapService, ARequestSplitIntoSingleBytesIsServed) {
  RunningService s(1);
  s.start();
  std::string bytes = frame(s.service().token() + " FENCE 0 1\n" + encode_kv({{"k", "v"}}));
  int fd = connect_unix(s.service().address());
  for (char b : bytes) {
    ASSERT_EQ(::send(fd, &b, 1, MSG_NOSIGNAL), 1);
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  auto reply = read_frame(fd, 10000);
  ::close(fd);
  ASSERT_TRUE(reply.ok()) << reply.status();
  std::string want = "OK\n";
  put_u32(&want, 0);
  put_u32(&want, static_cast<std::uint32_t>(encode_kv({{"k", "v"}}).size()));
  EXPECT_EQ(*reply, want + encode_kv({{"k", "v"}}));
}

// Connections that never show the token are bounded (2 x size + 16); a rank's fresh one is
// still served beside them.
TEST(BootstrapService, SilentConnectionsAreBoundedAndARankIsStillServed) {
  RunningService s(1);
  s.start();
  std::vector<int> silent;
  silent.reserve(30);
  for (int i = 0; i < 30; ++i) silent.push_back(connect_unix(s.service().address()));
  auto rank = rank_client(s.service().address(), s.service().token(), 0, 1);
  ASSERT_TRUE(rank->put("k", "v").ok());
  absl::Status st = rank->fence();
  for (int fd : silent) ::close(fd);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_GE(s.closed_unserved(), 30 - 18);
  EXPECT_EQ(s.rejected(), 0);
}

}  // namespace
}  // namespace sluice::detail
