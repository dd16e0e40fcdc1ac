// sluice-crowd-sim: what an idle engine with many peers costs, over the fake transport
// (lib/transport/fake.h) in one process. Rank 0 is a real engine; ranks 1..N are scripted
// peers, one fake worker each, that answer the engine's HELLO with their own and its PINGs
// with PONGs and otherwise stay quiet. Once every handshake is done (or refused), the engine
// waits as an idle server does (Engine::wait) for the given time; the engine thread's CPU time
// over that span, over the span, is the figure. The same run with one peer comes first, as the baseline.
//
//   sluice-crowd-sim [--peers N] [--seconds S]      (defaults 10000, 10)
//
// The scripted peers make no calls: SLUICE_RPC_WINDOW defaults to 1 here, so that the send
// budget's reply reservations hold 10,000 peers.
//
// Prints a CSV header and a row per run: peers, seconds, cpu (a fraction of a core), pings (the
// engine sent), watched (peers its timers visit every tick at the end), cpu_ratio (over the
// one-peer run's).
#include <time.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <sluice/context.h>
#include <sluice/engine.h>
#include <sluice/testing.h>

#include "transport/transport.h"
#include "wire/wire.h"

namespace sluice::detail {
namespace {

using Bytes = std::vector<std::byte>;

// The job's addresses: rank 0's from its engine, the others' from their workers; fence()
// returns at once (everything is put before the engine asks).
class CrowdBootstrap final : public Bootstrap {
 public:
  explicit CrowdBootstrap(std::vector<std::string> addresses) : addresses_(std::move(addresses)) {}
  int rank() const override { return 0; }
  int size() const override { return static_cast<int>(addresses_.size()); }
  absl::Status put(std::string_view, std::string_view value) override {
    addresses_[0] = std::string(value);
    return absl::OkStatus();
  }
  absl::Status fence() override { return absl::OkStatus(); }
  absl::StatusOr<std::string> get(int rank, std::string_view) override {
    return addresses_[static_cast<std::size_t>(rank)];
  }
  std::string name() const override { return "crowd-sim"; }

 private:
  std::vector<std::string> addresses_;
};

// One scripted peer: its HELLO once the engine's address is known, a PONG for each PING.
class CrowdPeer {
 public:
  CrowdPeer(const TransportContext& ctx, std::uint32_t rank) : rank_(rank), worker_(std::move(*Worker::create(ctx))) {
    for (auto& r : rx_) post(r);
  }
  const std::string& address() const { return worker_->address(); }
  void start(const std::string& engine_address) {
    ep_ = std::move(*worker_->connect(
        engine_address, [](void*, int) {}, nullptr));
    wire::Hello h{rank_, 0, 8192, 16, 4, rank_, 1, kKey};
    Bytes body(wire::kHelloSize);
    wire::encode_hello(h, body.data());
    wire::Header hdr;
    hdr.flags = wire::kFlagCtrl;
    hdr.handler = wire::kHello;
    hdr.user_header_len = wire::kHelloSize;
    hdr.aux = 1;
    send(hdr, body, wire::make_tag(wire::kCtrl, rank_, 0));
  }
  void progress() { worker_->progress(); }
  bool ready() const { return key_ != 0; }

 private:
  static constexpr std::uint64_t kKey = 0x5eed;
  struct Rx {
    CrowdPeer* self;
    TransportOp op;
    std::byte buf[512];
  };
  void post(Rx& r) {
    r.self = this;
    r.op.on_complete = [](TransportOp* op, absl::StatusCode code, std::size_t len, Tag) {
      Rx* rx = reinterpret_cast<Rx*>(reinterpret_cast<char*>(op) - offsetof(Rx, op));
      if (code != absl::StatusCode::kOk) return;
      rx->self->on_message(std::span<const std::byte>(rx->buf, len));
      rx->self->post(*rx);
    };
    worker_->post_recv(Endpoint(), &r.op, r.buf, sizeof(r.buf), Tag{1} << 60, Tag{1} << 60, nullptr);
  }
  void on_message(std::span<const std::byte> bytes) {
    wire::Header h;
    if (wire::decode(bytes, &h) != wire::Parse::kOk || !(h.flags & wire::kFlagCtrl)) return;
    if (h.handler == wire::kHello) {
      wire::Hello hello{};
      if (wire::decode_hello(bytes.subspan(wire::kHeaderSize), &hello) == wire::Parse::kOk) key_ = hello.rx_key;
    } else if (h.handler == wire::kPing && key_ != 0) {
      wire::Header pong;
      pong.flags = wire::kFlagCtrl;
      pong.handler = wire::kPong;
      send(pong, {}, wire::make_tag(wire::kEager, rank_, key_));
    }
  }
  void send(const wire::Header& h, std::span<const std::byte> body, Tag tag) {
    auto& out = sends_[next_++ % sends_.size()];
    out.bytes.assign(wire::kHeaderSize + body.size(), std::byte{0});
    wire::encode(h, out.bytes.data());
    if (!body.empty()) std::memcpy(out.bytes.data() + wire::kHeaderSize, body.data(), body.size());
    out.op.on_complete = [](TransportOp*, absl::StatusCode, std::size_t, Tag) {};
    (void)ep_.post_send(&out.op, out.bytes.data(), out.bytes.size(), tag, nullptr);
  }

  struct Out {
    TransportOp op;
    Bytes bytes;
  };
  std::uint32_t rank_;
  std::unique_ptr<Worker> worker_;
  Endpoint ep_;
  Rx rx_[2];
  std::array<Out, 4> sends_;  // small eager sends complete at once on the fake
  std::size_t next_ = 0;
  std::uint64_t key_ = 0;
};

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Row {
  std::size_t peers;
  double seconds, cpu;
  std::uint64_t pings;
  std::size_t watched, ready;
  std::uint64_t failed;
};

Row run(std::size_t n, double seconds) {
  auto ctx_t = TransportContext::create(Config());
  if (!ctx_t.ok()) std::exit((std::fprintf(stderr, "crowd-sim: %s\n", ctx_t.status().ToString().c_str()), 1));
  std::vector<std::unique_ptr<CrowdPeer>> peers;
  std::vector<std::string> addresses(n + 1);
  for (std::uint32_t i = 1; i <= n; ++i) {
    peers.push_back(std::make_unique<CrowdPeer>(**ctx_t, i));
    addresses[i] = peers.back()->address();
  }
  ContextOptions o;
  auto boot = std::make_unique<CrowdBootstrap>(addresses);
  CrowdBootstrap* job = boot.get();
  o.bootstrap = std::move(boot);
  auto ctx = Context::create(std::move(o));
  auto engine = ctx.ok() ? (*ctx)->create_engine() : absl::StatusOr<std::unique_ptr<Engine>>(ctx.status());
  if (!engine.ok()) std::exit((std::fprintf(stderr, "crowd-sim: %s\n", engine.status().ToString().c_str()), 1));
  Engine& e = **engine;
  // The engine's address went to the bootstrap at its creation: every peer says HELLO to it.
  std::string engine_address = *job->get(0, "");
  std::atomic<bool> stop{false};
  std::atomic<std::size_t> ready{0};
  std::thread crowd([&] {  // the peers' side, on its own thread (the fake's fabric is locked)
    for (auto& p : peers) p->start(engine_address);
    while (!stop.load()) {
      std::size_t r = 0;
      for (auto& p : peers) {
        p->progress();
        r += p->ready() ? 1 : 0;
      }
      ready.store(r);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  // Every handshake done, or refused (a budget that cannot hold them all).
  while (ready.load() + e.stats().value("peers.failed") < n && std::chrono::steady_clock::now() < give_up)
    e.wait(std::chrono::steady_clock::now() + std::chrono::milliseconds(10));
  for (auto settle = std::chrono::steady_clock::now() + std::chrono::seconds(1);
       std::chrono::steady_clock::now() < settle;)
    e.wait(settle);
  std::uint64_t pings0 = e.stats().value("peers.heartbeats");
  double cpu0 = thread_cpu_seconds();
  auto t0 = std::chrono::steady_clock::now();
  auto end =
      t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
  while (std::chrono::steady_clock::now() < end) e.wait(end);
  double cpu = thread_cpu_seconds() - cpu0;
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Row row{n,
          wall,
          cpu / wall,
          e.stats().value("peers.heartbeats") - pings0,
          sluice::testing::watched_peers(e),
          ready.load(),
          e.stats().value("peers.failed")};
  stop.store(true);
  crowd.join();
  return row;
}

}  // namespace
}  // namespace sluice::detail

int main(int argc, char** argv) {
  std::size_t peers = 10000;
  double seconds = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--peers") == 0) peers = std::strtoul(argv[i + 1], nullptr, 10);
    else if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::strtod(argv[i + 1], nullptr);
    else return (std::fprintf(stderr, "usage: sluice-crowd-sim [--peers N] [--seconds S]\n"), 2);
  }
  if (peers == 0 || !(seconds > 0)) return (std::fprintf(stderr, "sluice-crowd-sim: --peers > 0, --seconds > 0\n"), 2);
  // Every peer's reply reservation (2 send slots per request of the RPC window) comes out of the
  // send budget: at the default window of 32, 256 MiB holds about 500 peers.
  setenv("SLUICE_RPC_WINDOW", "1", 0);
  std::printf("peers,ready,seconds,cpu,pings,watched,failed,cpu_ratio\n");
  auto base = sluice::detail::run(1, seconds);
  for (const auto& r : {base, sluice::detail::run(peers, seconds)})
    std::printf("%zu,%zu,%.1f,%.5f,%llu,%zu,%llu,%.2f\n", r.peers, r.ready, r.seconds, r.cpu,
                static_cast<unsigned long long>(r.pings), r.watched, static_cast<unsigned long long>(r.failed),
                base.cpu > 0 ? r.cpu / base.cpu : 0.0);
  return 0;
}
