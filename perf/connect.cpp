#include "connect.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <utility>

#include "tests.h"

namespace sluice::perf {
namespace {

// The handshake's handler, beside bench.h's (900-918).
constexpr HandlerId kHello = 930;
// Where a launched server publishes its address for rank 1.
constexpr char kAddressKey[] = "perf.cs.address";
constexpr std::uint32_t kHelloMagic = 0x73706366;  // "spcf"

// What the client's hello tells the server: the options that shape the server's side.
struct Hello {
  std::uint32_t magic = kHelloMagic;
  std::uint32_t rpc_copy = 0;  // --rpc copy
  std::uint32_t bounce = 0;    // --baseline bounce: a bounce engine connects too
  std::uint32_t unused = 0;
  std::uint64_t largest = 0;  // largest_payload()
};
// The server's answer: where its bounce engine listens (0: it has none).
struct Welcome {
  std::int32_t bounce_port = 0;
};

template <typename T>
std::span<const std::byte> bytes_of(const T& t) {
  return std::as_bytes(std::span(&t, 1));
}

std::string host_of(const std::string& address) { return address.substr(0, address.rfind(':')); }

// A wildcard listening host names no host to connect to: the machine's name is published.
std::string reachable_host(const std::string& host) {
  if (host != "0.0.0.0" && host != "::" && host != "[::]" && !host.empty()) return host;
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "127.0.0.1";
  return name;
}

}  // namespace

absl::StatusOr<Engines> create_engines(Context& ctx, const Options& o) {
  if (o.baseline == "ucx" && ctx.size() < 2) {
    return absl::InvalidArgumentError(
        "--baseline ucx needs a launcher (sluice-run -n 2): the raw loop exchanges worker addresses through its "
        "bootstrap");
  }
  if (o.baseline == "mpi" && ctx.size() < 2) {
    return absl::InvalidArgumentError(
        "--baseline mpi needs a launcher (sluice-run -n 2): rank 0 runs the MPI jobs while rank 1 waits");
  }
  Engines e;
  SLUICE_ASSIGN_OR_RETURN(e.main, ctx.create_engine());
  if (o.baseline == "mpi" && ctx.rank() == 0) e.mpi = std::make_unique<MpiBaseline>(o);
  if (o.baseline == "bounce") {
    Config c = ctx.config();
    c.rndv = false;
    auto b = ctx.create_engine({.numa = std::nullopt, .config = c});
    if (!b.ok()) return absl::Status(b.status().code(), "bounce engine: " + std::string(b.status().message()));
    e.bounce = std::move(*b);
  } else if (o.baseline == "ucx") {
    SLUICE_ASSIGN_OR_RETURN(e.raw, RawUcx::create(ctx.bootstrap(), static_cast<std::size_t>(o.offset)));
  }
  return e;
}

std::size_t largest_payload(const Options& o) {
  std::size_t largest = kMixedStreamSize;
  for (std::size_t s : o.sizes) largest = std::max(largest, s);
  // Without -s, any test's sizes: a cs server does not know which tests its client runs.
  for (const Test& t : tests())
    for (std::size_t s : t.sizes)
      if (o.sizes.empty()) largest = std::max(largest, s);
  return largest;
}

bool Link::alive() const {
  if (!cs_) return true;
  return main_peer_ != nullptr && main_peer_->alive() && (bounce_peer_ == nullptr || bounce_peer_->alive());
}

// cs mode's handshake, one side of it.
class Connector {
 public:
  Connector(Context& ctx, Engines& engines, Options& o) : ctx_(ctx), e_(engines), o_(o) {
    link_.cs_ = true;
    link_.bounce_ = engines.bounce.get();
    link_.raw_peer_ = 1 - ctx.rank();
  }

  absl::StatusOr<Link> run() {
    // Without --server or --connect, the launcher's job says: rank 0 serves, rank 1 connects.
    launched_ = !o_.server && o_.connect.empty();
    if (launched_ && ctx_.size() != 2) {
      return absl::InvalidArgumentError(ctx_.size() < 2
                                            ? "-m cs without a launcher needs --server or --connect HOST:PORT"
                                            : "-m cs runs between two processes: sluice-run -n 2");
    }
    bool server = o_.server || (launched_ && ctx_.rank() == 0);
    link_.role_ = server ? 1 : 0;
    SLUICE_RETURN_IF_ERROR(server ? accept() : connect());
    return std::move(link_);
  }

 private:
  // The server: listens, publishes where, and waits for the client's hello (and its bounce
  // engine's); the client's --rpc and sizes become this side's.
  absl::Status accept() {
    std::string address = o_.listen.empty() ? "127.0.0.1:0" : o_.listen;
    std::string host = host_of(address);
    SLUICE_ASSIGN_OR_RETURN(int port, e_.main->listen(address));
    Welcome welcome;
    if (e_.bounce) {  // the macro is several statements
      SLUICE_ASSIGN_OR_RETURN(welcome.bounce_port, e_.bounce->listen(host + ":0"));
    }
    std::string published = reachable_host(host) + ":" + std::to_string(port);
    link_.sides_ = "the server at " + published + " answers a client";
    if (launched_) {
      SLUICE_RETURN_IF_ERROR(ctx_.bootstrap().put(kAddressKey, published));
      SLUICE_RETURN_IF_ERROR(ctx_.bootstrap().fence());
    } else {
      std::fprintf(stderr, "sluice-perf: listening on %s (the client: sluice-perf -m cs --connect %s ...)\n",
                   published.c_str(), published.c_str());
    }
    std::optional<Hello> hello;
    absl::Status refused;
    SLUICE_RETURN_IF_ERROR(e_.main->register_handler(kHello, [&](Message& m) {
      Hello h;
      if (m.payload().size() == sizeof(h)) std::memcpy(&h, m.payload().data(), sizeof(h));
      if (m.payload().size() != sizeof(h) || h.magic != kHelloMagic) {
        (void)m.reply_error(absl::InvalidArgumentError("not a hello of this sluice-perf"));
        return;  // someone else's: wait on for ours
      }
      if (h.bounce != 0 && !e_.bounce) {
        refused = absl::FailedPreconditionError(
            "the client runs --baseline bounce: start the server with --baseline bounce too");
        (void)m.reply_error(refused);
      } else {
        link_.main_peer_ = m.peer();
        (void)m.reply_copy({}, bytes_of(welcome));
      }
      hello = h;
    }));
    e_.main->run_until([&] { return hello.has_value(); });
    SLUICE_RETURN_IF_ERROR(e_.main->unregister_handler(kHello));
    SLUICE_RETURN_IF_ERROR(refused);  // the answer still goes out as the engine closes
    if (hello->bounce != 0) SLUICE_RETURN_IF_ERROR(accept_bounce());
    o_.rpc = hello->rpc_copy != 0 ? "copy" : "zero";
    o_.sizes = {static_cast<std::size_t>(hello->largest)};
    return absl::OkStatus();
  }

  // The client's bounce engine connects once it has the answer: within its connect timeout.
  absl::Status accept_bounce() {
    Engine& b = *e_.bounce;
    SLUICE_RETURN_IF_ERROR(b.register_handler(kHello, [this](Message& m) { link_.bounce_peer_ = m.peer(); }));
    auto deadline = Clock::now() + 2 * ctx_.config().connect_timeout;
    if (!b.run_until([&] { return link_.bounce_peer_ != nullptr; }, deadline)) {
      return absl::DeadlineExceededError("the client's bounce engine did not connect");
    }
    return b.unregister_handler(kHello);
  }

  // The client: connects, says hello with its settings, and connects its bounce engine to the
  // port the answer names.
  absl::Status connect() {
    std::string address = o_.connect;
    if (address.empty()) {
      SLUICE_RETURN_IF_ERROR(ctx_.bootstrap().fence());
      SLUICE_ASSIGN_OR_RETURN(address, ctx_.bootstrap().get(0, kAddressKey));
    }
    link_.sides_ = "a client against the server at " + address;
    SLUICE_ASSIGN_OR_RETURN(link_.main_peer_, e_.main->connect(address));
    Hello hello;
    hello.rpc_copy = o_.rpc == "copy" ? 1 : 0;
    hello.bounce = e_.bounce ? 1 : 0;
    hello.largest = largest_payload(o_);
    Welcome welcome;
    std::optional<absl::Status> answer;
    auto on_reply = [&](absl::Status s, Message& m) {
      if (s.ok() && m.payload().size() != sizeof(welcome)) s = absl::InternalError("a short answer to the hello");
      if (s.ok()) std::memcpy(&welcome, m.payload().data(), sizeof(welcome));
      answer = s;
    };
    CallOptions options;
    options.timeout = ctx_.config().connect_timeout;
    Result r = link_.main_peer_->call(kHello, bytes_of(hello), options, on_reply);
    if (r != Result::kOk) return absl::UnavailableError(std::string("hello: ") + to_string(r));
    e_.main->run_until([&] { return answer.has_value(); });
    SLUICE_RETURN_IF_ERROR(*answer);  // it names the server
    if (!e_.bounce) return absl::OkStatus();
    std::string bounce_address = host_of(address) + ":" + std::to_string(welcome.bounce_port);
    SLUICE_ASSIGN_OR_RETURN(link_.bounce_peer_, e_.bounce->connect(bounce_address));
    e_.bounce->run_until([&] { return (r = link_.bounce_peer_->send(kHello, {})) != Result::kWouldBlock; });
    if (r != Result::kOk) return absl::UnavailableError(std::string("bounce hello: ") + to_string(r));
    return absl::OkStatus();
  }

  Context& ctx_;
  Engines& e_;
  Options& o_;
  Link link_;
  bool launched_ = false;
};

absl::StatusOr<Link> connect_sides(Context& ctx, Engines& engines, Options& o) {
  if (o.mode == "cs") return Connector(ctx, engines, o).run();
  Link link;
  link.role_ = ctx.rank();
  link.size_ = ctx.size();
  link.raw_peer_ = 1 - ctx.rank();
  link.sides_ = ctx.size() == 2 ? "rank 0 against rank 1" : "rank 0 against ranks 1-" + std::to_string(ctx.size() - 1);
  return link;
}

}  // namespace sluice::perf
