// sluice-perf's Sluice side: the handlers every side installs, one function per test (the
// table in tests.h names them), and the driver's and the other sides' loops around them.
//
// The driver (rank 0; cs: the client) tells every other side to run a Cmd (kCmd), waits until
// each has taken it (kReady), runs its own part, and waits until each has finished (kDone).
// The other sides serve commands until told to quit.
#pragma once

#include <span>
#include <string>
#include <vector>

#include <sluice/sluice.h>

#include "buffer.h"
#include "connect.h"
#include "options.h"
#include "report.h"
#include "rows.h"

namespace sluice::perf {

struct Test;  // tests.h

class Bench {
 public:
  Bench(Context& ctx, Engines& engines, const Link& link, const Options& o);

  // Every side: the handlers, on the main engine and the bounce baseline's.
  absl::Status setup();

  // The driver: tells everyone to run `c`, runs it, waits for everyone to finish. An error only
  // from an MPI job that gave no figures (mpi_baseline.h).
  absl::StatusOr<Figures> drive(const Cmd& c);
  // The driver: tells the other sides to stop serving.
  void quit();
  // The other sides: serve commands until told to quit.
  void serve();

  // The tests, Sluice side: every side calls its test's function on the engine the Cmd names.
  // The driver's returns the figures; the others' return when their part is done.
  Figures am_lat(Engine& e, const Cmd& c);
  Figures am_bw(Engine& e, const Cmd& c);
  Figures am_submit(Engine& e, const Cmd& c);
  Figures rpc_lat(Engine& e, const Cmd& c) { return rpc(e, c, 1, kEcho); }
  Figures rpc_rate(Engine& e, const Cmd& c) { return rpc(e, c, c.window, kEcho); }
  Figures read(Engine& e, const Cmd& c) { return rpc(e, c, 1, kRead); }
  Figures write(Engine& e, const Cmd& c) { return rpc(e, c, 1, kWrite); }
  Figures bulk_bw(Engine& e, const Cmd& c) { return stream(e, c, kBulk); }
  Figures mixed(Engine& e, const Cmd& c);
  Figures fanin(Engine& e, const Cmd& c);

  // Sends, progressing while the peer has no room; exits 1 when the send fails.
  void send_spin(Engine& e, int to, HandlerId h, std::span<const std::byte> payload,
                 std::span<const std::byte> header = {}, SendCallback cb = {});
  // Exits 1 after saying which side failed and how.
  [[noreturn]] void fail(const std::string& what) const;

 private:
  static constexpr HandlerId kCmd = 900, kDone = 901, kReady = 902, kLat = 910, kBw = 911, kAck = 912, kEcho = 913,
                             kBulk = 914, kStream = 915, kFlood = 916, kRead = 917, kWrite = 918;

  absl::Status install(Engine& e);
  absl::Status install_storage(Engine& e);
  // Where rendezvous payloads land: one buffer, sized once for the largest message of the run
  // (never reallocated while a transfer may be writing into it).
  std::span<std::byte> sink(std::size_t n) {
    if (landing_.size() < n) return {};  // larger than planned: a receive-pool slot
    return std::span(landing_.data(), n);
  }
  void progress_all() {
    main_.progress();
    if (bounce_) bounce_->progress();
  }
  // Who this process is, in messages: "rank N", or cs mode's client or server.
  std::string side() const { return link_.cs() ? (me_ == 0 ? "client" : "server") : "rank " + std::to_string(me_); }
  void reply_failed(Result r) const;
  void keep_alive(Engine& e);
  // Progresses until `done`; the clock is read rarely (it is not free on every machine, and
  // the raw baseline's loops do not read it either). A template, not a std::function: the
  // echoing rank of am_lat waits here, and its polling loop is part of what is measured. A cs
  // side whose other side is gone stops at once.
  template <typename Done>
  void wait_for(const Done& done, const char* what) {
    auto deadline = Clock::now() + std::chrono::seconds(300);
    for (unsigned n = 1; !done(); ++n) {
      progress_all();
      if (n % 4096 != 0) continue;
      if (Clock::now() > deadline) fail(std::string("timed out waiting for ") + what);
      if (!link_.alive()) fail(std::string("the other side is gone: it left while waiting for ") + what);
    }
  }
  void reset() {
    received_ = replies_ = acks_ = 0;
    completions_ = 0;
  }
  // The test `c` names (exits 1 when it names none).
  const Test& test_of(const Cmd& c) const;
  Figures run_one(const Cmd& c);
  // Raw UCX's loop for `c` (the test's baseline function).
  Figures run_raw(const Test& t, const Cmd& c);
  // The driver: the MPI job `c` names. The other sides: asleep in the engine until it is over.
  absl::StatusOr<Figures> run_mpi(const Test& t, const Cmd& c);
  void sleep_until_done();
  Figures stream(Engine& e, const Cmd& c, HandlerId h);
  struct Calls;
  void issue(Engine& e, HandlerId h, std::span<const std::byte> header, std::span<const std::byte> request,
             Calls& calls, int i);
  Figures rpc(Engine& e, const Cmd& c, int window, HandlerId h);
  void run_mixed_streamer(Engine& e);

  Context& ctx_;
  Engine& main_;
  Engine* bounce_;
  RawUcx* raw_;
  MpiBaseline* mpi_;
  const Link& link_;
  const Options& o_;
  const bool zero_copy_ = o_.rpc == "zero";  // compared once: handlers run once per call
  int me_, n_;
  PageBuffer landing_;
  PageBuffer block_;  // what read replies carry
  Cmd pending_cmd_{};
  bool have_cmd_ = false;
  int ready_count_ = 0;
  int done_count_ = 0;
  int received_ = 0, replies_ = 0, acks_ = 0, completions_ = 0;
  bool holding_ = false;  // fanin: rank 0 keeps what arrives
  std::vector<Message> held_;
};

}  // namespace sluice::perf
