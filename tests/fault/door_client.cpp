// A blockstore client that rides out a server restart (driven by door_test.py).
//
//   door_client HOST:PORT SECONDS
//
// Writes blocks (ids 0, 1, ...) with up to 8 calls in flight. When a call fails with
// Unavailable (the server died), it waits for the others, reconnects (retrying until
// SECONDS have passed) and then checks the new incarnation: a block the old one acknowledged
// must be unknown to it (NotFound: nothing of the old incarnation reached the new one), and a
// block written now must read back. Prints one line, key=value, and exits 0 when every call
// completed exactly once and every check held:
//   result connects=N ok=N unavailable=N other=N twice=N old_block=NOT_FOUND|... new_block=ok|...
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <sluice/sluice.h>

using namespace sluice;

namespace {

constexpr HandlerId kWrite = 1, kRead = 2;  // blockstore's

struct Outcome {
  int connects = 0, ok = 0, unavailable = 0, other = 0, twice = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: door_client HOST:PORT SECONDS\n");
    return 2;
  }
  std::string address = argv[1];
  auto until = Clock::now() + std::chrono::seconds(std::atoi(argv[2]));
  auto ctx = Context::create();
  if (!ctx.ok()) return std::fprintf(stderr, "%s\n", ctx.status().ToString().c_str()), 1;
  auto engine = (*ctx)->create_engine();
  if (!engine.ok()) return std::fprintf(stderr, "%s\n", engine.status().ToString().c_str()), 1;
  Engine& e = **engine;
  Outcome out;
  auto connect = [&]() -> Peer* {
    while (Clock::now() < until) {
      auto p = e.connect(address);
      if (p.ok()) {
        ++out.connects;
        return *p;
      }
      e.wait(Clock::now() + std::chrono::milliseconds(20));
    }
    return nullptr;
  };
  Peer* peer = connect();
  if (peer == nullptr) return std::fprintf(stderr, "door_client: cannot connect to %s\n", address.c_str()), 1;
  std::vector<std::byte> block(64 << 10, std::byte{0x5a});
  std::vector<int> completions;  // per call
  int in_flight = 0;
  std::uint64_t next_id = 0;
  std::int64_t acked_before_failure = -1;  // a block the first incarnation acknowledged
  bool failed = false;
  while (!failed && Clock::now() < until) {
    if (in_flight < 8) {
      std::uint64_t id = next_id;
      std::size_t call = completions.size();
      completions.push_back(0);
      Result r =
          peer->call(kWrite, std::as_bytes(std::span(&id, 1)), block, {}, [&, call, id](absl::Status s, Message&) {
            if (++completions[call] > 1) ++out.twice;
            --in_flight;
            if (s.ok()) {
              ++out.ok;
              if (!failed) acked_before_failure = static_cast<std::int64_t>(id);
            } else if (absl::IsUnavailable(s)) {
              ++out.unavailable;
              failed = true;
            } else {
              ++out.other;
              std::fprintf(stderr, "door_client: %s\n", s.ToString().c_str());
            }
          });
      if (r == Result::kOk) {
        ++in_flight;
        ++next_id;
        continue;
      }
      completions.pop_back();
      if (r == Result::kUnavailable) failed = true;
    }
    e.progress();
  }
  // Every call completes exactly once, also those in flight when the server died.
  e.run_until([&] { return in_flight == 0; }, Clock::now() + std::chrono::seconds(30));
  std::string old_block = "unchecked", new_block = "unchecked";
  if (failed && (peer = connect()) != nullptr) {
    auto read = [&](std::uint64_t id) {
      std::string outcome = "pending";
      std::vector<std::byte> buf(block.size());
      CallOptions o;
      o.reply_buffer = buf;
      Result r = peer->call(kRead, std::as_bytes(std::span(&id, 1)), {}, o, [&](absl::Status s, Message& m) {
        outcome =
            !s.ok() ? std::string(absl::StatusCodeToString(s.code()))
            : m.payload().size() == block.size() && std::memcmp(m.payload().data(), block.data(), block.size()) == 0
                ? "ok"
                : "corrupt";
      });
      if (r != Result::kOk) return std::string("not sent: ") + to_string(r);
      e.run_until([&] { return outcome != "pending"; }, Clock::now() + std::chrono::seconds(30));
      return outcome;
    };
    if (acked_before_failure >= 0) old_block = read(static_cast<std::uint64_t>(acked_before_failure));
    std::uint64_t id = 1u << 30;
    bool written = false;
    Result r = peer->call(kWrite, std::as_bytes(std::span(&id, 1)), block, {}, [&](absl::Status s, Message&) {
      written = s.ok();
      new_block = s.ok() ? "pending" : std::string(absl::StatusCodeToString(s.code()));
    });
    if (r == Result::kOk)
      e.run_until([&] { return new_block != "unchecked"; }, Clock::now() + std::chrono::seconds(30));
    if (written) new_block = read(id);
  }
  std::printf("result connects=%d ok=%d unavailable=%d other=%d twice=%d outstanding=%d old_block=%s new_block=%s\n",
              out.connects, out.ok, out.unavailable, out.other, out.twice, in_flight, old_block.c_str(),
              new_block.c_str());
  bool good = out.twice == 0 && in_flight == 0 && out.other == 0 && old_block == "NOT_FOUND" && new_block == "ok";
  return good ? 0 : 3;
}
