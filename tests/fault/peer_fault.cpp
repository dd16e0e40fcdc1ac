// The process side of the peer-failure tests (driven by fault_test.py, three processes started
// by hand with the file bootstrap, so that no launcher ends the job when one dies).
//
// Rank 0 streams eager and rendezvous messages to ranks 1 and 2 and counts what completes,
// how and when. Rank 1 is the victim (killed or stopped by the driver); it also streams small
// messages to rank 0. Rank 2 is the bystander whose traffic must go on.
//
// Every message carries its sender's sequence number towards its destination in the user
// header; every receiver counts the ones that do not come next (lost or out of order).
//
// Rank 0 prints one line of results, key=value, and exits 0 when every promise held:
//   every operation towards rank 1 completed exactly once (ok or Unavailable), none is left
//   in the transport, the send pool is full again, rank 2 kept receiving after the failure,
//   what it received came in order. Ranks 1 and 2 exit 4 when what they received did not.
//   It also reports how many shared-memory segments (SysV or POSIX) of dead processes it still has mapped
//   (dead_peer_segments; the driver asserts none).
//
//   peer_fault kill|stop|stop-survive [SECONDS]
//   (SECONDS: how long rank 0 streams in stop-survive, default 8)
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <sluice/sluice.h>
#include <sluice/testing.h>

using namespace sluice;
using Secs = std::chrono::duration<double>;

// The POSIX shared-memory files of UCX (in /dev/shm) that some living process holds open: a
// segment's creator keeps its file open while the segment lives.
static std::set<std::string> posix_segments_held() {
  std::set<std::string> held;
  std::error_code ec;
  for (const auto& proc : std::filesystem::directory_iterator("/proc", ec)) {
    std::error_code fd_ec;
    for (const auto& fd : std::filesystem::directory_iterator(proc.path() / "fd", fd_ec)) {
      std::error_code link_ec;
      std::string target = std::filesystem::read_symlink(fd.path(), link_ec).string();
      if (!link_ec && target.rfind("/dev/shm/ucx_shm_posix", 0) == 0) held.insert(target.substr(0, target.find(' ')));
    }
  }
  return held;
}

// How many shared memory segments this process still has mapped whose creator is gone: a dead
// peer's FIFO and receive buffers that its transport never let go of. SysV: the maps name a
// mapping's segment id as its inode, and /proc/sysvipc/shm names each segment's creator.
// POSIX: a mapped file of /dev/shm that no process holds open.
static int dead_peer_segments() {
  std::set<long> mapped;
  std::set<std::string> posix;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    std::istringstream fields(line);
    std::string range, perms, offset, dev, path;
    long inode = -1;
    fields >> range >> perms >> offset >> dev >> inode >> path;
    if (path.find("SYSV") != std::string::npos) mapped.insert(inode);
    if (path.rfind("/dev/shm/ucx_shm_posix", 0) == 0) posix.insert(path);
  }
  int dead = 0;
  std::ifstream shm("/proc/sysvipc/shm");
  std::string header;
  std::getline(shm, header);
  for (std::string line; std::getline(shm, line);) {
    std::istringstream fields(line);
    long key, shmid, perms, size, cpid;
    if (!(fields >> key >> shmid >> perms >> size >> cpid)) continue;
    if (mapped.count(shmid) && ::kill(static_cast<pid_t>(cpid), 0) != 0 && errno == ESRCH) {
      ++dead;
      std::fprintf(stderr, "dead peer segment: SysV %ld of pid %ld\n", shmid, cpid);
    }
  }
  std::set<std::string> held = posix_segments_held();
  for (const std::string& path : posix) {
    if (held.count(path) != 0) continue;
    ++dead;
    std::fprintf(stderr, "dead peer segment: %s\n", path.c_str());
  }
  return dead;
}

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "kill";  // kill | stop | stop-survive
  double survive_s = argc > 2 ? std::atof(argv[2]) : 8.0;
  // Send buffers outlive the engine: its close still sends what is in flight.
  std::vector<std::byte> small(64), big(std::size_t{1} << 20);
  int from0 = 0, from1 = 0, finish = 0;
  auto ctx = Context::create();
  if (!ctx.ok()) {
    std::fprintf(stderr, "peer_fault: %s\n", ctx.status().ToString().c_str());
    return 1;
  }
  auto eng = (*ctx)->create_engine();
  if (!eng.ok()) {
    std::fprintf(stderr, "peer_fault: %s\n", eng.status().ToString().c_str());
    return 1;
  }
  Engine& e = **eng;
  int me = e.rank();
  // Sequence numbers: the next one expected from each rank, and the next one to send to it.
  std::vector<std::uint64_t> expect(static_cast<std::size_t>(e.size()), 0), next_seq(expect);
  long misordered = 0;
  // Rank 0 lands rank 1's rendezvous payloads in buffers of its own (a storage server's block
  // buffers): each must come back exactly once, to the handler or to sink_release.
  std::map<const std::byte*, std::unique_ptr<std::byte[]>> sink_out;
  long sink_given = 0, sink_delivered = 0, sink_returned = 0, sink_stray = 0;
  HandlerOptions options;
  if (me == 0) {
    options.sink = [&](const Message& m, std::size_t size) -> std::span<std::byte> {
      if (m.source() != 1) return {};
      auto buf = std::make_unique<std::byte[]>(size);
      std::span<std::byte> where(buf.get(), size);
      sink_out[where.data()] = std::move(buf);
      ++sink_given;
      return where;
    };
    options.sink_release = [&](const Message&, std::span<std::byte> buffer) {
      sink_out.erase(buffer.data()) == 1 ? ++sink_returned : ++sink_stray;
    };
  }
  (void)e.register_handler(
      1,
      [&](Message& m) {
        if (me == 0 && m.source() == 1 && !m.payload().empty()) sink_delivered += sink_out.erase(m.payload().data());
        m.source() == 0 ? ++from0 : ++from1;
        std::uint64_t seq = ~std::uint64_t{0};
        if (m.header().size() == sizeof(seq)) std::memcpy(&seq, m.header().data(), sizeof(seq));
        auto& want = expect[static_cast<std::size_t>(m.source())];
        if (seq != want) ++misordered;
        want = seq + 1;
      },
      std::move(options));
  // Sends with the next sequence number towards `to` in the header (copied by send()); the
  // number is used up only when the send is taken.
  auto send_seq = [&](int to, std::span<const std::byte> payload, SendCallback cb = {}) {
    auto& seq = next_seq[static_cast<std::size_t>(to)];
    Result r = e.peer(to)->send(1, std::as_bytes(std::span(&seq, 1)), payload, std::move(cb));
    if (r == Result::kOk) ++seq;
    return r;
  };
  (void)e.register_handler(2, [&](Message&) { ++finish; });
  // Requests to handler 3 are kept, never answered: with PEER_FAULT_HOLD_CALL=1 rank 0 keeps one
  // call to rank 1 open, an operation that is in flight whenever rank 1 dies.
  std::vector<Message> unanswered;
  (void)e.register_handler(3, [&](Message& m) { unanswered.push_back(std::move(m)); });
  std::printf("rank %d pid %d ready\n", me, getpid());
  std::fflush(stdout);

  if (me == 1) {
    // The victim: receives, and sends to rank 0 every millisecond (PEER_FAULT_SEND_MS), every
    // 8th time (or every PEER_FAULT_LARGE_EVERY-th; 0: never) a 1 MiB rendezvous payload, so it
    // dies with payloads half sent. It starts sending once rank 0's first message is in: the
    // handshake is then rank 0's to start, so a victim dying in it (SLUICE_FAULT_AT=hello)
    // leaves rank 0 with sends waiting on it.
    const char* every_env = std::getenv("PEER_FAULT_LARGE_EVERY");
    long every = every_env ? std::atol(every_env) : 8;
    const char* ms_env = std::getenv("PEER_FAULT_SEND_MS");
    auto gap = std::chrono::milliseconds(ms_env ? std::max(1L, std::atol(ms_env)) : 1);
    auto next = Clock::now();
    long n = 0;
    while (true) {
      e.progress();
      if (from0 > 0 && Clock::now() >= next) {
        bool large = every > 0 && ++n % every == 0;
        (void)send_seq(0, large ? std::span<const std::byte>(big) : std::span<const std::byte>(small));
        next += gap;
      }
      if (finish) {
        std::printf("rank 1 received %d misordered %ld\n", from0, misordered);
        return misordered == 0 ? 0 : 4;
      }
    }
  }
  if (me == 2) {
    e.run_until([&] { return finish > 0; }, Clock::now() + std::chrono::seconds(120));
    std::printf("rank 2 received %d misordered %ld\n", from0, misordered);
    if (misordered != 0) return 4;
    return finish ? 0 : 1;
  }

  // Rank 0.
  struct Flow {
    long sent = 0, ok = 0, failed = 0, twice = 0;
  } to1, to2;
  std::vector<int> done_count;
  Clock::time_point first_failure{}, last_ok{};
  double gap1 = 0;  // the longest time without a send to rank 1 completing while some were open
  // Seconds since the epoch, to compare with the driver's time of the fault.
  double first_failure_wall = -1, last_failure_wall = -1;
  auto t_start = Clock::now();
  auto send = [&](int to, Flow& f, bool large) {
    auto idx = done_count.size();
    done_count.push_back(0);
    Result r = send_seq(to, large ? std::span<const std::byte>(big) : std::span<const std::byte>(small),
                        [&, idx, to](absl::Status s) {
                          Flow& ff = to == 1 ? to1 : to2;
                          if (++done_count[idx] > 1) ++ff.twice;
                          if (s.ok()) {
                            ++ff.ok;
                            if (to == 1) {
                              auto now = Clock::now();
                              if (last_ok != Clock::time_point{}) gap1 = std::max(gap1, Secs(now - last_ok).count());
                              last_ok = now;
                            }
                          } else {
                            if (s.code() != absl::StatusCode::kUnavailable)
                              std::fprintf(stderr, "unexpected status %s\n", s.ToString().c_str());
                            if (ff.failed++ == 0 && to == 1) first_failure = Clock::now();
                            if (to == 1) {
                              last_failure_wall = Secs(std::chrono::system_clock::now().time_since_epoch()).count();
                              if (first_failure_wall < 0) first_failure_wall = last_failure_wall;
                            }
                          }
                        });
    if (r == Result::kOk) ++f.sent;
    else done_count.pop_back();
    return r;
  };
  std::string held_call = "none";
  if (const char* hold = std::getenv("PEER_FAULT_HOLD_CALL"); hold != nullptr && std::string(hold) == "1") {
    Result r = e.peer(1)->call(3, {}, {}, CallOptions{},
                               [&](absl::Status s, Message&) { held_call = absl::StatusCodeToString(s.code()); });
    held_call = r == Result::kOk ? "pending" : sluice::to_string(r);
  }
  bool dead = false;
  long to2_after_failure_start = -1;
  int rank1_msgs_at_death = -1;
  long i = 0;
  double limit = mode == "stop-survive" ? survive_s : 30.0;
  while (Secs(Clock::now() - t_start).count() < limit) {
    e.progress();
    bool large = ++i % 16 == 0;
    if (to1.sent - to1.ok - to1.failed < 32 && !dead) {
      if (send(1, to1, large) == Result::kUnavailable) {
        dead = true;
        rank1_msgs_at_death = from1;
        to2_after_failure_start = to2.ok;
      }
    }
    if (to2.sent - to2.ok - to2.failed < 32) (void)send(2, to2, large);
    if (dead && to2.ok - to2_after_failure_start > 2000 &&
        Secs(Clock::now() - first_failure).count() > (mode == "kill" ? 0.5 : 5.0))
      break;
    if (i % 64 == 0) {
      std::fflush(stdout);
    }
  }
  // Everything towards rank 1 must now be resolved, and the transport must hold nothing of it.
  e.run_until([&] { return to1.ok + to1.failed == to1.sent && to2.ok + to2.failed == to2.sent; },
              Clock::now() + std::chrono::seconds(10));
  // Counted before the finish: a bystander that has its finish may exit at once, and its own
  // segments, still mapped here until its endpoint goes, would count as a dead peer's.
  const int dead_segments = dead_peer_segments();
  // The finish messages complete too before the pools are counted: one may wait in the send
  // queue (holding its slot) until the bystander returns credits.
  int finishes = 0, finished = 0;
  auto finish_done = [&](absl::Status) { ++finished; };
  if (e.peer(2)->send(2, {}, {}, finish_done) == Result::kOk) ++finishes;
  if (mode == "stop-survive" && e.peer(1)->send(2, {}, {}, finish_done) == Result::kOk) ++finishes;
  // A payload rank 1 had announced before the finish either lands or is cancelled by its
  // goodbye; until then its exact receive is rightly posted, so wait for that too.
  e.run_until(
      [&] {
        return finished == finishes && testing::outstanding_sends(e) == 0 && testing::posted_exact_receives(e) == 0;
      },
      Clock::now() + std::chrono::seconds(10));
  auto ps = e.pool_stats(Direction::kSend);
  std::size_t held = 0;
  for (const auto& c : ps.classes) held += c.slots_total - c.slots_free;
  // Receive side: every eager slot held is a live peer's (its posted receives, its kept messages),
  // none the dead one's; no landing slot of a large class may stay held by a payload that never
  // completed.
  auto rs = e.pool_stats(Direction::kRecv);
  std::size_t held_landing = 0;
  for (std::size_t k = 1; k < rs.classes.size(); ++k)
    held_landing += rs.classes[k].slots_total - rs.classes[k].slots_free;
  std::size_t held_eager = rs.classes[0].slots_total - rs.classes[0].slots_free;
  std::size_t held_by_peers = 0;  // every one accounted to a peer, none to the dead one
  for (int r = 1; r < e.size(); ++r) held_by_peers += testing::receive_slots_held(e, r);
  const Stats& st = e.stats();
  double detect = dead ? Secs(first_failure - last_ok).count() : -1;
  std::printf(
      "result dead=%d sent1=%ld ok1=%ld failed1=%ld twice=%ld sent2=%ld ok2=%ld failed2=%ld "
      "to2_after=%ld detect_s=%.3f outstanding=%zu held_send_slots=%zu posted_exact=%zu "
      "dropped=%lu from1_at_death=%d from1=%d peers_failed=%lu held_landing=%zu held_eager=%zu held_by_peers=%zu "
      "first_failure_wall=%.6f last_failure_wall=%.6f orphaned=%lu misordered=%ld gap1_s=%.3f "
      "dead_peer_segments=%d sink_given=%ld sink_delivered=%ld sink_returned=%ld sink_out=%zu "
      "sink_stray=%ld held_call=%s\n",
      dead, to1.sent, to1.ok, to1.failed, to1.twice + to2.twice, to2.sent, to2.ok, to2.failed,
      dead ? to2.ok - to2_after_failure_start : -1, detect, testing::outstanding_sends(e), held,
      testing::posted_exact_receives(e), static_cast<unsigned long>(st.value("am.dropped")), rank1_msgs_at_death, from1,
      static_cast<unsigned long>(st.value("peers.failed")), held_landing, held_eager, held_by_peers, first_failure_wall,
      last_failure_wall, static_cast<unsigned long>(st.value("am.orphaned_sends")), misordered, gap1, dead_segments,
      sink_given, sink_delivered, sink_returned, sink_out.size(), sink_stray, held_call.c_str());
  std::fflush(stdout);
  bool ok = to1.ok + to1.failed == to1.sent && to1.twice + to2.twice == 0 && to2.failed == 0 && misordered == 0 &&
            testing::outstanding_sends(e) == 0 && held == 0 && testing::posted_exact_receives(e) == 0 &&
            held_landing == 0 && sink_out.empty() && sink_stray == 0 && held_eager == held_by_peers &&
            (!dead || testing::receive_slots_held(e, 1) == 0);
  return ok ? 0 : 3;
}
