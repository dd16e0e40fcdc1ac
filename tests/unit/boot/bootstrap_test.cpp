// Which bootstrap the environment chooses, the variables it refuses (naming them), the
// sluice-run client against a service that is absent, silent or answers nonsense, and the
// shared-directory bootstrap.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "boot/kv.h"
#include "boot/make_bootstrap.h"
#include "boot/pmix.h"
#include "core/net.h"

namespace sluice::detail {
namespace {

using ::testing::HasSubstr;

Config boot_config(const std::string& boot, Duration timeout = std::chrono::seconds(10)) {
  Config c;
  c.boot = boot;
  c.connect_timeout = timeout;
  return c;
}

ProcessEnv launched(int rank, int size, std::string addr = "", std::string token = "0123abcd") {
  ProcessEnv env;
  env.rank = rank;
  env.size = size;
  env.boot_addr = std::move(addr);
  env.boot_token = std::move(token);
  return env;
}

std::string error_of(const absl::StatusOr<std::unique_ptr<Bootstrap>>& b) {
  EXPECT_FALSE(b.ok());
  return b.ok() ? "" : std::string(b.status().message());
}

// A private directory, removed with what it holds.
struct TempDir {
  std::string path;
  TempDir() {
    char templ[] = "/tmp/sluice-boot-test.XXXXXX";
    path = ::mkdtemp(templ);
  }
  ~TempDir() { std::system(("rm -rf " + path).c_str()); }
};

TEST(MakeBootstrap, AutoChoosesSluiceRunWhenItsAddressIsSetElseASingleRank) {
  ScopedConfigOverride no_rank("PMIX_RANK", std::nullopt), no_ns("PMIX_NAMESPACE", std::nullopt);
  auto single = make_bootstrap(boot_config("auto"), ProcessEnv{});
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ((*single)->name(), "single");
  EXPECT_EQ((*single)->rank(), 0);
  EXPECT_EQ((*single)->size(), 1);
  auto run = make_bootstrap(boot_config("auto"), launched(2, 4, "/tmp/nowhere.sock"));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ((*run)->name(), "sluice-run");  // made without reaching the service: that is the first fence
  EXPECT_EQ((*run)->rank(), 2);
  EXPECT_EQ((*run)->size(), 4);
  EXPECT_EQ((*run)->local_size(), 0);  // sluice-run did not say
}

// How many ranks share this host, as the launcher said: SLUICE_LOCAL_SIZE for sluice-run and
// the shared directory, all of them for a single rank and an in-process group.
TEST(MakeBootstrap, TheRanksOnThisHostAreWhatTheLauncherSaid) {
  ProcessEnv env = launched(1, 4, "/tmp/nowhere.sock");
  env.local_size = 3;
  EXPECT_EQ(make_bootstrap(boot_config("sluice-run"), env).value()->local_size(), 3);
  TempDir dir;
  EXPECT_EQ(make_bootstrap(boot_config("file:" + dir.path), env).value()->local_size(), 3);
  EXPECT_EQ(make_bootstrap(boot_config("single"), env).value()->local_size(), 1);
  for (const auto& b : make_in_process_group(3)) EXPECT_EQ(b->local_size(), 3);
}

TEST(MakeBootstrap, PmixIsChosenOnlyWhenBothOfItsVariablesAreSet) {
  ScopedConfigOverride no_rank("PMIX_RANK", std::nullopt), no_ns("PMIX_NAMESPACE", std::nullopt);
  EXPECT_FALSE(pmix_available_from_environment());
  {
    ScopedConfigOverride rank("PMIX_RANK", "0");
    EXPECT_FALSE(pmix_available_from_environment());
  }
  {
    ScopedConfigOverride ns("PMIX_NAMESPACE", "job");
    EXPECT_FALSE(pmix_available_from_environment());
  }
  ScopedConfigOverride rank("PMIX_RANK", "0"), ns("PMIX_NAMESPACE", "job");
  EXPECT_TRUE(pmix_available_from_environment());
}

TEST(MakeBootstrap, ASingleRankFencesAlone) {
  auto b = make_bootstrap(boot_config("single"), launched(5, 9)).value();
  EXPECT_EQ(b->rank(), 0);  // SLUICE_BOOT=single ignores the launcher's variables
  ASSERT_TRUE(b->put("k", "v").ok());
  EXPECT_EQ(b->get(0, "k").value_or("?"), "v");  // its own puts, before the fence
  ASSERT_TRUE(b->fence().ok());
  EXPECT_EQ(b->get(0, "k").value_or("?"), "v");
  EXPECT_EQ(b->get(1, "k").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b->get(0, "other").status().code(), absl::StatusCode::kNotFound);
}

TEST(MakeBootstrap, RefusesWhatItLacksNamingTheVariable) {
  struct Case {
    const char* boot;
    ProcessEnv env;
    const char* says;
  } cases[] = {
      {"sluice-run", launched(-1, 2, "/tmp/x.sock"), "SLUICE_BOOT=sluice-run needs SLUICE_RANK and SLUICE_SIZE"},
      {"sluice-run", launched(0, 0, "/tmp/x.sock"), "SLUICE_BOOT=sluice-run needs SLUICE_RANK and SLUICE_SIZE"},
      {"sluice-run", launched(0, 2), "SLUICE_BOOT=sluice-run needs SLUICE_BOOT_ADDR"},
      {"sluice-run", launched(0, 2, "/tmp/x.sock", ""), "SLUICE_BOOT=sluice-run needs SLUICE_BOOT_TOKEN"},
      {"sluice-run", launched(0, 2, "/tmp/x.sock", "two words"),
       "SLUICE_BOOT_TOKEN is not 1 to 128 characters without a blank"},
      {"sluice-run", launched(0, 2, "/tmp/x.sock", std::string(129, 'a')),
       "SLUICE_BOOT_TOKEN is not 1 to 128 characters without a blank"},
      {"file:/nonexistent-sluice-dir", launched(0, 2),
       "SLUICE_BOOT=file:/nonexistent-sluice-dir: "
       "/nonexistent-sluice-dir is not a directory"},
      {"file:/tmp", launched(-1, -1), "SLUICE_BOOT=file:/tmp needs SLUICE_RANK and SLUICE_SIZE (now -1 and -1)"},
      {"mpi", ProcessEnv{}, "SLUICE_BOOT=mpi is not supported"},
  };
  for (const Case& c : cases) {
    auto b = make_bootstrap(boot_config(c.boot), c.env);
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << c.says;
    EXPECT_THAT(error_of(b), HasSubstr(c.says));
  }
}

// The public make_bootstrap reads the variables itself; a bad one is refused by name.
TEST(MakeBootstrap, FromTheEnvironmentBadValuesAreRefusedByName) {
  for (auto [name, value, says] :
       {std::tuple{"SLUICE_RANK", "first", "SLUICE_RANK=first"}, std::tuple{"SLUICE_SIZE", "-5", "SLUICE_SIZE=-5"},
        std::tuple{"SLUICE_RANK", "3", "SLUICE_RANK=3 is not below SLUICE_SIZE=2"}}) {
    ScopedConfigOverride size("SLUICE_SIZE", "2"), var(name, value);
    auto b = make_bootstrap(Config());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << says;
    EXPECT_THAT(error_of(b), HasSubstr(says));
  }
  for (const char* value : {"mpi", "file:", "Single"}) {
    ScopedConfigOverride boot("SLUICE_BOOT", value);
    auto c = Config::from_env();
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << value;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(std::string("SLUICE_BOOT=") + value + ": not auto"));
  }
  ScopedConfigOverride no_rank("PMIX_RANK", std::nullopt), no_ns("PMIX_NAMESPACE", std::nullopt);
  ScopedConfigOverride rank("SLUICE_RANK", "1"), size("SLUICE_SIZE", "3"), addr("SLUICE_BOOT_ADDR", "/tmp/x.sock"),
      token("SLUICE_BOOT_TOKEN", "00ff");
  auto b = make_bootstrap(Config());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->name(), "sluice-run");
  EXPECT_EQ((*b)->rank(), 1);
  EXPECT_EQ((*b)->size(), 3);
}

// The sluice-run client's first fence reaches the service; what it cannot reach, it names.
TEST(SluiceRunClient, AnUnreachableServiceIsNamedBySluiceBootAddr) {
  TempDir dir;
  auto free_port = tcp_listen("127.0.0.1", 0);  // a port nothing listens on once closed
  ASSERT_TRUE(free_port.ok()) << free_port.status();
  ::close(free_port->fd);
  struct Case {
    std::string addr;
    absl::StatusCode code;
    std::string says;
  } cases[] = {
      {dir.path + "/none.sock", absl::StatusCode::kUnavailable,
       "cannot reach sluice-run's bootstrap service at SLUICE_BOOT_ADDR=" + dir.path + "/none.sock"},
      {"tcp:127.0.0.1:" + std::to_string(free_port->port), absl::StatusCode::kUnavailable,
       "cannot reach sluice-run's bootstrap service at SLUICE_BOOT_ADDR=tcp:127.0.0.1:"},
      {"tcp:localhost", absl::StatusCode::kInvalidArgument, "SLUICE_BOOT_ADDR=tcp:localhost: need tcp:HOST:PORT"},
      {"/" + std::string(200, 'p'), absl::StatusCode::kInvalidArgument, "SLUICE_BOOT_ADDR is too long"},
  };
  for (const Case& c : cases) {
    auto b = make_bootstrap(boot_config("sluice-run"), launched(0, 2, c.addr)).value();
    absl::Status st = b->fence();
    EXPECT_EQ(st.code(), c.code) << c.addr << ": " << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr(c.says));
  }
}

// A stand-in service on a Unix socket that answers one connection with `reply` (nothing when
// empty), then holds it open for `hold` before closing.
class FakeService {
 public:
  FakeService(std::string reply, std::chrono::milliseconds hold) : path_(dir_.path + "/boot.sock") {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, path_.data(), path_.size());
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    EXPECT_EQ(::listen(fd_, 4), 0);
    thread_ = std::thread([this, reply = std::move(reply), hold] {
      int c = ::accept(fd_, nullptr, nullptr);
      request_ = read_frame(c, 10000).value_or("no request");
      if (!reply.empty()) (void)write_frame(c, reply);
      std::this_thread::sleep_for(hold);
      ::close(c);
    });
  }
  ~FakeService() {
    thread_.join();
    ::close(fd_);
  }
  const std::string& path() const { return path_; }
  std::string request() {
    thread_.join();
    thread_ = std::thread([] {});
    return request_;
  }

 private:
  TempDir dir_;
  std::string path_;
  int fd_ = -1;
  std::string request_;
  std::thread thread_;
};

std::string entry(std::uint32_t rank, const KvMap& kv) {
  std::string out;
  put_u32(&out, rank);
  std::string blob = encode_kv(kv);
  put_u32(&out, static_cast<std::uint32_t>(blob.size()));
  return out + blob;
}

TEST(SluiceRunClient, SendsItsTokenRankAndEpochAndReadsEveryRanksBlob) {
  FakeService svc("OK\n" + entry(0, {{"k", "zero"}}) + entry(1, {{"k", "one"}}), std::chrono::milliseconds(0));
  auto b = make_bootstrap(boot_config("sluice-run"), launched(1, 2, svc.path(), "feed")).value();
  ASSERT_TRUE(b->put("k", "one").ok());
  ASSERT_TRUE(b->fence().ok());
  EXPECT_EQ(svc.request(), "feed FENCE 1 1\n" + encode_kv({{"k", "one"}}));
  EXPECT_EQ(b->get(0, "k").value_or("?"), "zero");
}

TEST(SluiceRunClient, AMalformedReplyIsRefused) {
  const std::string good0 = entry(0, {{"k", "zero"}}), good1 = entry(1, {{"k", "one"}});
  std::string bad_blob;  // rank 1's entry: 6 bytes, a key length of 3 and 2 bytes
  put_u32(&bad_blob, 1);
  put_u32(&bad_blob, 6);
  put_u32(&bad_blob, 3);
  bad_blob += "ab";
  struct Case {
    std::string reply;
    std::string says;
  } cases[] = {
      {"ERR wrong token\n", "sluice-run refused fence 1: ERR wrong token"},
      {"?", "sluice-run refused fence 1: ?"},
      {"OK\n" + good0, "malformed fence reply"},                       // rank 1 missing
      {"OK\n" + good0 + good1.substr(0, 6), "malformed fence reply"},  // rank 1 cut short
      {"OK\n" + good0 + entry(2, {}), "malformed fence reply"},        // a rank beyond the job
      {"OK\n" + good0 + good0, "malformed fence reply"},               // rank 0 twice, rank 1 never
      {"OK\n" + good0 + good1 + "x", "malformed fence reply"},         // trailing bytes
      {"OK\n" + good0 + bad_blob,
       "bootstrap blob: key length 3 at byte 0 runs past its end (2 bytes left)"},  // rank 1's blob malformed
  };
  for (const Case& c : cases) {
    FakeService svc(c.reply, std::chrono::milliseconds(0));
    auto b = make_bootstrap(boot_config("sluice-run"), launched(1, 2, svc.path())).value();
    absl::Status st = b->fence();
    EXPECT_FALSE(st.ok()) << c.says;
    EXPECT_THAT(std::string(st.message()), HasSubstr(c.says));
  }
}

TEST(SluiceRunClient, AServiceThatHangsUpOrStaysSilentFailsTheFence) {
  {
    FakeService svc("", std::chrono::milliseconds(0));
    auto b = make_bootstrap(boot_config("sluice-run"), launched(0, 2, svc.path())).value();
    absl::Status st = b->fence();
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr("fence 1 through sluice-run: bootstrap service closed"));
  }
  FakeService svc("", std::chrono::milliseconds(300));
  auto b =
      make_bootstrap(boot_config("sluice-run", std::chrono::milliseconds(100)), launched(0, 2, svc.path())).value();
  absl::Status st = b->fence();
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("(SLUICE_CONNECT_TIMEOUT=100ms)"));
}

TEST(FileBootstrap, TwoRanksFenceThroughASharedDirectory) {
  TempDir dir;
  std::vector<std::unique_ptr<Bootstrap>> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(make_bootstrap(boot_config("file:" + dir.path), launched(r, 2)).value());
    EXPECT_EQ(ranks[r]->name(), "file");
    ASSERT_TRUE(ranks[r]->put("k", std::string("\0r", 2) + std::to_string(r)).ok());
  }
  absl::Status st[2];
  std::thread t([&] { st[1] = ranks[1]->fence(); });
  st[0] = ranks[0]->fence();
  t.join();
  ASSERT_TRUE(st[0].ok() && st[1].ok()) << st[0] << " " << st[1];
  EXPECT_EQ(ranks[0]->get(1, "k").value_or("?"), std::string("\0r1", 3));
  EXPECT_EQ(ranks[1]->get(0, "k").value_or("?"), std::string("\0r0", 3));
}

TEST(FileBootstrap, AMissingRankTimesOutAndACorruptFileIsRefused) {
  TempDir dir;
  auto lone = make_bootstrap(boot_config("file:" + dir.path, std::chrono::milliseconds(50)), launched(1, 2)).value();
  absl::Status st = lone->fence();
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(st.message()), HasSubstr("rank 0 did not reach fence 1 within SLUICE_CONNECT_TIMEOUT=50ms"));
  std::ofstream(dir.path + "/fence-2.rank-0") << std::string("\x09\x00\x00\x00k", 5);
  st = lone->fence();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("fence-2.rank-0: bootstrap blob: key length 9"));
}

}  // namespace
}  // namespace sluice::detail
