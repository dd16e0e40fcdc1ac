// Peers failed while UCX's wire-up of their endpoints crosses (issue 33, item 20): started by
// sluice-run, every rank sends one rendezvous payload to every other rank at once, 2 MiB from
// odd ranks and 512 KiB from even ones. Run the even ranks with SLUICE_MAX_MESSAGE=1M: each
// fails every odd peer on its announcement while its own payload to that peer, and both
// directions' UCX wire-up requests, are under way. No rank may abort (UCX 1.13.1 did, in
// ucp_ep.inl:215, when a failed peer's endpoint was force-closed before the peer's request
// was handled). Prints what each rank's sends came to; exit 0 unless the engine did not start.
#include <chrono>
#include <cstdio>
#include <vector>

#include <sluice/sluice.h>

using namespace sluice;

int main() {
  auto ctx = Context::create();
  if (!ctx.ok()) {
    std::fprintf(stderr, "cross_fail: %s\n", ctx.status().ToString().c_str());
    return 2;
  }
  int me = (*ctx)->rank(), n = (*ctx)->size();
  auto eng = (*ctx)->create_engine();
  if (!eng.ok()) {
    std::fprintf(stderr, "cross_fail: rank %d: %s\n", me, eng.status().ToString().c_str());
    return 2;
  }
  Engine& e = **eng;
  std::vector<std::byte> payload(me % 2 != 0 ? std::size_t{2} << 20 : std::size_t{512} << 10, std::byte{1});
  int got = 0, ok = 0, failed = 0;
  (void)e.register_handler(1, [&](Message&) { ++got; });
  for (int k = 1; k < n; ++k) {
    Result r = e.peer((me + k) % n)->send(1, {}, payload, [&](absl::Status s) { ++(s.ok() ? ok : failed); });
    if (r != Result::kOk) ++failed;
  }
  e.run_until([&] { return ok + failed == n - 1 && got >= n / 2 - 1; }, Clock::now() + std::chrono::seconds(3));
  std::printf("cross_fail: rank %d: sends ok %d, failed %d; received %d\n", me, ok, failed, got);
  return 0;
}
