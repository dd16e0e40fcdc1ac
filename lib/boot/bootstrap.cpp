// Bootstrap implementations: single rank, in-process group, shared directory, sluice-run.
// PMIx is in pmix.cpp.
#include <sluice/bootstrap.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include <absl/strings/str_format.h>

#include "boot/kv.h"
#include "boot/make_bootstrap.h"
#include "boot/pmix.h"
#include "core/log.h"
#include "core/net.h"

namespace sluice {
namespace detail {
namespace {

// Keeps this rank's puts and, after a fence, everyone's.
class ExchangeBase : public Bootstrap {
 public:
  absl::Status put(std::string_view key, std::string_view value) override {
    mine_[std::string(key)] = std::string(value);
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> get(int rank, std::string_view key) override {
    if (rank < 0 || rank >= size()) {
      return absl::InvalidArgumentError(absl::StrFormat("rank %d is not in [0, %d)", rank, size()));
    }
    if (rank == this->rank()) {
      auto it = mine_.find(key);
      if (it != mine_.end()) return it->second;
    }
    if (static_cast<std::size_t>(rank) < all_.size()) {
      auto it = all_[static_cast<std::size_t>(rank)].find(key);
      if (it != all_[static_cast<std::size_t>(rank)].end()) return it->second;
    }
    return absl::NotFoundError(absl::StrFormat("rank %d published no '%s' (before the last fence)", rank, key));
  }

 protected:
  KvMap mine_;
  std::vector<KvMap> all_;
};

class SingleBootstrap final : public ExchangeBase {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_size() const override { return 1; }
  absl::Status fence() override {
    all_ = {mine_};
    return absl::OkStatus();
  }
  std::string name() const override { return "single"; }
};

// ---- in-process group -----------------------------------------------------------------

struct Group {
  explicit Group(int n) : size(n), blobs(static_cast<std::size_t>(n)) {}
  int size;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  std::uint64_t generation = 0;
  std::vector<KvMap> blobs;
  std::vector<KvMap> published;
};

class InProcessBootstrap final : public ExchangeBase {
 public:
  InProcessBootstrap(std::shared_ptr<Group> g, int rank) : group_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size; }
  int local_size() const override { return group_->size; }
  absl::Status fence() override {
    std::unique_lock lock(group_->mu);
    group_->blobs[static_cast<std::size_t>(rank_)] = mine_;
    std::uint64_t gen = group_->generation;
    if (++group_->arrived == group_->size) {
      group_->published = group_->blobs;
      group_->arrived = 0;
      ++group_->generation;
      group_->cv.notify_all();
    } else if (!group_->cv.wait_for(lock, std::chrono::seconds(60), [&] { return group_->generation != gen; })) {
      return absl::DeadlineExceededError("in-process fence: not every rank arrived within 60s");
    }
    all_ = group_->published;
    return absl::OkStatus();
  }
  std::string name() const override { return "in-process"; }

 private:
  std::shared_ptr<Group> group_;
  int rank_;
};

// ---- shared directory (SLUICE_BOOT=file:DIR) -------------------------------------------

class FileBootstrap final : public ExchangeBase {
 public:
  FileBootstrap(std::string dir, const ProcessEnv& env, Duration timeout)
      : dir_(std::move(dir)),
        rank_(env.rank),
        size_(env.size),
        local_size_(std::max(env.local_size, 0)),
        timeout_(timeout) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  std::string name() const override { return "file"; }

  absl::Status fence() override {
    ++epoch_;
    std::string path = file_of(rank_);
    std::string tmp = path + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << encode_kv(mine_);
      if (!out.good()) {
        return absl::UnavailableError(absl::StrFormat("SLUICE_BOOT=file:%s: cannot write %s", dir_, tmp));
      }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      return absl::UnavailableError(
          absl::StrFormat("SLUICE_BOOT=file:%s: cannot rename %s: %s", dir_, tmp, std::strerror(errno)));
    }
    auto deadline = std::chrono::steady_clock::now() + timeout_;
    std::vector<KvMap> all(static_cast<std::size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      while (true) {
        std::ifstream in(file_of(r), std::ios::binary);
        if (in.good()) {
          std::stringstream ss;
          ss << in.rdbuf();
          auto kv = decode_kv(ss.str());
          if (!kv.ok())
            return absl::DataLossError(
                absl::StrFormat("SLUICE_BOOT=file:%s: %s: %s", dir_, file_of(r), kv.status().message()));
          all[static_cast<std::size_t>(r)] = *std::move(kv);
          break;
        }
        if (timeout_ != kInfinite && std::chrono::steady_clock::now() >= deadline) {
          return absl::DeadlineExceededError(
              absl::StrFormat("SLUICE_BOOT=file:%s: rank %d did not reach fence %d within SLUICE_CONNECT_TIMEOUT=%s",
                              dir_, r, epoch_, format_duration(timeout_)));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    all_ = std::move(all);
    return absl::OkStatus();
  }

 private:
  std::string file_of(int r) const { return absl::StrFormat("%s/fence-%d.rank-%d", dir_, epoch_, r); }
  std::string dir_;
  int rank_, size_, local_size_;
  Duration timeout_;
  int epoch_ = 0;
};

// ---- sluice-run's service ---------------------------------------------------------------

class LauncherBootstrap final : public ExchangeBase {
 public:
  LauncherBootstrap(const ProcessEnv& env, Duration timeout)
      : addr_(env.boot_addr),
        token_(env.boot_token),
        rank_(env.rank),
        size_(env.size),
        local_size_(std::max(env.local_size, 0)),
        timeout_(timeout) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  std::string name() const override { return "sluice-run"; }

  // SLUICE_CONNECT_TIMEOUT in milliseconds (inf: 2^30, twelve days).
  int timeout_ms() const {
    return timeout_ == kInfinite
               ? 1 << 30
               : static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(timeout_).count());
  }

  // A Unix socket's path, or tcp:HOST:PORT for a rank on another host than sluice-run's.
  absl::StatusOr<int> connect_service() const {
    auto unreachable = [&](const std::string& why) {
      return absl::UnavailableError(
          absl::StrFormat("cannot reach sluice-run's bootstrap service at SLUICE_BOOT_ADDR=%s: %s", addr_, why));
    };
    if (addr_.rfind("tcp:", 0) == 0) {
      auto hp = parse_host_port(std::string_view(addr_).substr(4));
      if (!hp.ok()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("SLUICE_BOOT_ADDR=%s: need tcp:HOST:PORT: %s", addr_, hp.status().message()));
      }
      auto started = tcp_start_connect(hp->host, hp->port);
      if (!started.ok()) return unreachable(std::string(started.status().message()));
      int fd = *started;
      // Connected within SLUICE_CONNECT_TIMEOUT, asleep meanwhile.
      pollfd p{fd, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof(err);
      if (::poll(&p, 1, timeout_ms()) != 1 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
        ::close(fd);
        return unreachable(err != 0 ? std::strerror(err)
                                    : "no connection within SLUICE_CONNECT_TIMEOUT=" + format_duration(timeout_));
      }
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      return fd;
    }
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::UnavailableError(absl::StrFormat("socket: %s", std::strerror(errno)));
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (addr_.size() >= sizeof(sa.sun_path)) {
      ::close(fd);
      return absl::InvalidArgumentError("SLUICE_BOOT_ADDR is too long");
    }
    std::memcpy(sa.sun_path, addr_.data(), addr_.size());
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
      int e = errno;
      ::close(fd);
      return unreachable(std::strerror(e));
    }
    return fd;
  }

  absl::Status fence() override {
    ++epoch_;
    SLUICE_ASSIGN_OR_RETURN(int fd, connect_service());
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{fd};
    std::string req = absl::StrFormat("%s FENCE %d %d\n", token_, rank_, epoch_) + encode_kv(mine_);
    SLUICE_RETURN_IF_ERROR(write_frame(fd, req));
    auto reply = read_frame(fd, timeout_ms());
    if (!reply.ok()) {
      return absl::Status(reply.status().code(),
                          absl::StrFormat("fence %d through sluice-run: %s (SLUICE_CONNECT_TIMEOUT=%s)", epoch_,
                                          reply.status().message(), format_duration(timeout_)));
    }
    std::string_view body = *reply;
    if (body.substr(0, 3) != "OK\n") {
      return absl::UnavailableError(absl::StrFormat("sluice-run refused fence %d: %s", epoch_, body));
    }
    body.remove_prefix(3);
    std::vector<KvMap> all(static_cast<std::size_t>(size_));
    // Every rank's blob, in rank order (as the service writes them), and nothing after.
    for (int i = 0; i < size_; ++i) {
      std::uint32_t r, len;
      if (!get_u32(&body, &r) || !get_u32(&body, &len) || r != static_cast<std::uint32_t>(i) || len > body.size())
        return absl::DataLossError(absl::StrFormat("malformed fence reply from sluice-run at rank %d's entry", i));
      SLUICE_ASSIGN_OR_RETURN(all[r], decode_kv(body.substr(0, len)));
      body.remove_prefix(len);
    }
    if (!body.empty())
      return absl::DataLossError(
          absl::StrFormat("malformed fence reply from sluice-run: %u bytes after the last rank's entry", body.size()));
    all_ = std::move(all);
    return absl::OkStatus();
  }

 private:
  std::string addr_, token_;
  int rank_, size_, local_size_;
  Duration timeout_;
  int epoch_ = 0;
};

absl::Status need_rank_and_size(const ProcessEnv& c, const char* what) {
  if (c.rank < 0 || c.size < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SLUICE_BOOT=%s needs SLUICE_RANK and SLUICE_SIZE (now %d and %d)", what, c.rank, c.size));
  }
  return absl::OkStatus();
}

// The token goes first on the service's request line: one word, at most what the service reads.
absl::Status check_token(const std::string& token) {
  if (token.empty())
    return absl::InvalidArgumentError("SLUICE_BOOT=sluice-run needs SLUICE_BOOT_TOKEN (run under sluice-run)");
  bool blank = std::any_of(token.begin(), token.end(), [](char ch) { return static_cast<unsigned char>(ch) <= ' '; });
  if (blank || token.size() > 128) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SLUICE_BOOT_TOKEN is not 1 to 128 characters without a blank (%u characters): set it as sluice-run does",
        token.size()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Bootstrap>> make_bootstrap(const Config& c, const ProcessEnv& env) {
  std::string boot = c.boot;
  if (boot == "auto") {
    if (pmix_available_from_environment()) boot = "pmix";
    else if (!env.boot_addr.empty()) boot = "sluice-run";
    else boot = "single";
    SLUICE_LOG(kDebug, "boot", "SLUICE_BOOT=auto chose %s", boot);
  }
  if (boot == "single") return std::unique_ptr<Bootstrap>(new SingleBootstrap());
  if (boot == "pmix") return make_pmix_bootstrap(c);
  if (boot == "sluice-run") {
    SLUICE_RETURN_IF_ERROR(need_rank_and_size(env, "sluice-run"));
    if (env.boot_addr.empty())
      return absl::InvalidArgumentError("SLUICE_BOOT=sluice-run needs SLUICE_BOOT_ADDR (run under sluice-run)");
    SLUICE_RETURN_IF_ERROR(check_token(env.boot_token));
    return std::unique_ptr<Bootstrap>(new LauncherBootstrap(env, c.connect_timeout));
  }
  if (boot.rfind("file:", 0) == 0) {
    SLUICE_RETURN_IF_ERROR(need_rank_and_size(env, boot.c_str()));
    std::string dir = boot.substr(5);
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrFormat("SLUICE_BOOT=%s: %s is not a directory", boot, dir));
    }
    return std::unique_ptr<Bootstrap>(new FileBootstrap(dir, env, c.connect_timeout));
  }
  return absl::InvalidArgumentError(absl::StrFormat("SLUICE_BOOT=%s is not supported", boot));
}

}  // namespace detail

absl::StatusOr<std::unique_ptr<Bootstrap>> make_bootstrap(const Config& c) {
  SLUICE_ASSIGN_OR_RETURN(detail::ProcessEnv env, detail::ProcessEnv::from_env());
  return detail::make_bootstrap(c, env);
}

std::vector<std::unique_ptr<Bootstrap>> make_in_process_group(int n) {
  auto g = std::make_shared<detail::Group>(n);
  std::vector<std::unique_ptr<Bootstrap>> out;
  out.reserve(static_cast<std::size_t>(std::max(n, 0)));
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<detail::InProcessBootstrap>(g, r));
  return out;
}

}  // namespace sluice
