// ping: two ranks bounce a message back and forth, written as a Sluice user would write it.
//
//   build/apps/sluice-run -n 2 build/apps/examples/ping [ITERATIONS] [SIZE]
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <sluice/sluice.h>

constexpr sluice::HandlerId kPing = 1;

int main(int argc, char** argv) {
  int iterations = argc > 1 ? std::atoi(argv[1]) : 10000;
  std::size_t size = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 8;

  auto ctx = sluice::Context::create();
  if (!ctx.ok()) {
    std::fprintf(stderr, "ping: %s\n", ctx.status().ToString().c_str());
    return 1;
  }
  if ((*ctx)->size() != 2) {
    std::fprintf(stderr, "ping: run with two ranks (sluice-run -n 2 ...)\n");
    return 1;
  }
  auto engine = (*ctx)->create_engine();
  if (!engine.ok()) {
    std::fprintf(stderr, "ping: %s\n", engine.status().ToString().c_str());
    return 1;
  }
  sluice::Engine& eng = **engine;
  int me = eng.rank();
  sluice::Peer* other = eng.peer(1 - me);
  std::vector<std::byte> buffer(size);

  int received = 0;
  absl::Status failure;
  // A send refused for lack of credit (kWouldBlock) is not retried in a loop of its own: it
  // stays due, and the run_until below retries it between progress calls.
  bool due = false;
  auto send = [&] {
    sluice::Result r = other->send(kPing, {}, buffer);
    due = r == sluice::Result::kWouldBlock;
    if (r != sluice::Result::kOk && !due) failure = sluice::to_status(r, "send");
  };
  auto status = eng.register_handler(kPing, [&](sluice::Message& m) {
    ++received;
    if (m.payload().size() != size) failure = absl::DataLossError("wrong payload size");
    if (me == 1 || received < iterations) send();
  });
  if (!status.ok()) {
    std::fprintf(stderr, "ping: %s\n", status.ToString().c_str());
    return 1;
  }
  auto start = sluice::Clock::now();
  if (me == 0) send();
  // No deadline of its own: a busy machine only makes it slower. A peer that dies is declared
  // dead within SLUICE_PEER_TIMEOUT, which ends the wait.
  eng.run_until([&] {
    if (due) send();
    return (received == iterations && !due) || !failure.ok() || !other->alive();
  });
  double us = std::chrono::duration<double, std::micro>(sluice::Clock::now() - start).count();
  if (failure.ok() && received != iterations) failure = absl::UnavailableError("the other rank failed");
  if (!failure.ok()) {
    std::fprintf(stderr, "ping: rank %d: %s\n", me, failure.ToString().c_str());
    return 1;
  }
  if (me == 0) {
    std::printf("ping: %d round trips of %zu bytes, %.3f us one way\n", iterations, size, us / iterations / 2);
  }
  return 0;
}
