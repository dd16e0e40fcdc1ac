// A legitimate blockstore client that keeps calling while attack_test.py attacks its server.
//
//   attack_client HOST:PORT ID SECONDS STOP_FILE
//
// Two lanes, each writing a block (200 B, 20 KiB, 200 KiB in turn: eager and rendezvous on
// either transport; a few block ids per lane, rewritten) and reading it back into a buffer of
// its own, a call every 2 ms at most per lane, until SECONDS have passed or STOP_FILE exists,
// or until a call fails: its connection is then gone, and it calls no more. Then it waits for
// every call still out (30 s at most: a call that never ends is a hang, and is counted as
// outstanding). Each call has a timeout, so that a lost reply is a status too. Prints one line,
// key=value:
//   result calls=N ok=N failed=N first_error=CODE failed_at=SECONDS mismatches=N outstanding=N
// (failed_at: seconds since the first call, -1 without a failure) and exits 0 when every call
// was answered ok and every block read back as written.
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <sluice/sluice.h>

using namespace sluice;

namespace {

constexpr HandlerId kWrite = 1, kRead = 2;  // blockstore's
constexpr std::size_t kSizes[] = {200, 20 << 10, 200 << 10};

struct Lane {
  enum class Step { kIdle, kWriting, kWritten, kReading } step = Step::kIdle;
  Clock::time_point next_call{};  // a call every 2 ms at most: clients share the machine's cores
  std::uint64_t id = 0;
  std::vector<std::byte> data, back;
};

void fill(std::vector<std::byte>* v, std::uint64_t id, std::size_t size) {
  v->resize(size);
  for (std::size_t i = 0; i < size; ++i) (*v)[i] = static_cast<std::byte>((id * 131 + i * 7) & 0xff);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: attack_client HOST:PORT ID SECONDS STOP_FILE\n");
    return 2;
  }
  const std::string address = argv[1], stop_file = argv[4];
  const std::uint64_t base = std::strtoull(argv[2], nullptr, 10) << 32;
  const auto until = Clock::now() + std::chrono::seconds(std::atoi(argv[3]));
  auto ctx = Context::create();
  if (!ctx.ok()) return std::fprintf(stderr, "attack_client: %s\n", ctx.status().ToString().c_str()), 1;
  auto engine = (*ctx)->create_engine();
  if (!engine.ok()) return std::fprintf(stderr, "attack_client: %s\n", engine.status().ToString().c_str()), 1;
  Engine& e = **engine;
  auto peer = e.connect(address);
  if (!peer.ok()) {
    std::printf("result calls=0 ok=0 failed=0 first_error=%s failed_at=0 mismatches=0 outstanding=0\n",
                absl::StatusCodeToString(peer.status().code()).c_str());
    std::fprintf(stderr, "attack_client: %s\n", peer.status().ToString().c_str());
    return 1;
  }
  std::printf("connected\n");
  std::fflush(stdout);
  const auto t0 = Clock::now();
  int calls = 0, ok = 0, failed = 0, mismatches = 0, in_flight = 0;
  std::string first_error = "none";
  double failed_at = -1;
  auto fail = [&](const absl::Status& s) {
    if (++failed == 1) {
      first_error = absl::StatusCodeToString(s.code());
      failed_at = std::chrono::duration<double>(Clock::now() - t0).count();
      std::fprintf(stderr, "attack_client: %s\n", s.ToString().c_str());
    }
  };
  CallOptions options;
  options.timeout = std::chrono::seconds(20);
  std::vector<Lane> lanes(2);
  std::uint64_t next = 0;
  auto issue = [&](Lane* lane) {
    Result r;
    if (lane->step == Lane::Step::kIdle) {
      // A few block ids per lane, rewritten over and over: the server's store stays small.
      lane->id = base + static_cast<std::uint64_t>(lane - lanes.data()) * 8 + next % 8;
      fill(&lane->data, lane->id + next, kSizes[next % 3]);
      ++next;
      r = (*peer)->call(kWrite, std::as_bytes(std::span(&lane->id, 1)), lane->data, options,
                        [&, lane](absl::Status s, Message&) {
                          --in_flight;
                          if (!s.ok()) return fail(s);
                          ++ok;
                          lane->step = Lane::Step::kWritten;
                        });
      if (r == Result::kOk) lane->step = Lane::Step::kWriting;
    } else {
      lane->back.assign(lane->data.size(), std::byte{0});
      CallOptions o = options;
      o.reply_buffer = lane->back;
      r = (*peer)->call(kRead, std::as_bytes(std::span(&lane->id, 1)), {}, o, [&, lane](absl::Status s, Message& m) {
        --in_flight;
        if (!s.ok()) return fail(s);
        ++ok;
        if (m.payload().size() != lane->data.size() ||
            std::memcmp(m.payload().data(), lane->data.data(), lane->data.size()) != 0)
          ++mismatches;
        lane->step = Lane::Step::kIdle;
      });
      if (r == Result::kOk) lane->step = Lane::Step::kReading;
    }
    if (r == Result::kOk) {
      ++calls;
      ++in_flight;
    } else if (r != Result::kWouldBlock) {
      fail(absl::UnavailableError(std::string("call refused: ") + to_string(r)));
    }
  };
  auto last_look = Clock::now();
  bool stop = false;
  while (!stop && failed == 0) {
    for (Lane& lane : lanes) {
      if (failed != 0 || Clock::now() < lane.next_call) continue;
      if (lane.step == Lane::Step::kIdle || lane.step == Lane::Step::kWritten) {
        issue(&lane);
        lane.next_call = Clock::now() + std::chrono::milliseconds(2);
      }
    }
    e.wait(Clock::now() + std::chrono::milliseconds(1));
    if (Clock::now() - last_look > std::chrono::milliseconds(50)) {
      struct stat st {};
      last_look = Clock::now();
      stop = Clock::now() >= until || ::stat(stop_file.c_str(), &st) == 0;
    }
  }
  e.run_until([&] { return in_flight == 0; }, Clock::now() + std::chrono::seconds(30));
  std::printf("result calls=%d ok=%d failed=%d first_error=%s failed_at=%.3f mismatches=%d outstanding=%d\n", calls, ok,
              failed, first_error.c_str(), failed_at, mismatches, in_flight);
  std::fflush(stdout);
  if (in_flight != 0) std::_Exit(3);  // callbacks of this frame are still registered: do not unwind
  return failed == 0 && mismatches == 0 ? 0 : 1;
}
