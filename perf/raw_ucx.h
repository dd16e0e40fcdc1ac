// The raw-UCX baseline of sluice-perf: the same patterns on plain UCP tag matching, with no
// Sluice in between (what ucx_perftest's tag_lat / tag_bw measure), run in the same process.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <sluice/bootstrap.h>
#include <sluice/status.h>

namespace sluice::perf {

struct Cmd;      // rows.h
struct Figures;  // report.h
class Link;      // connect.h

class RawUcx {
 public:
  // Collective: every rank creates one, exchanging worker addresses through `boot`. Buffers
  // it sends from start `send_offset` bytes into their page.
  static absl::StatusOr<std::unique_ptr<RawUcx>> create(Bootstrap& boot, std::size_t send_offset = 0);
  ~RawUcx();

  // Round trips between rank 0 and `peer`: rank 0 sends `there` bytes, `peer` answers with
  // `back` bytes (with `echo`, from the buffer the request just filled; else from a buffer of
  // its own, as a server sends a block). Rank 0 returns each round trip in seconds.
  std::vector<double> exchange(int peer, std::size_t there, std::size_t back, int iters, bool initiator, bool echo);
  // Streams `iters` messages of `size` from rank 0 to `peer` with at most `window` in flight;
  // the receiver answers once at the end. Returns the seconds the sender measured.
  double stream(int peer, std::size_t size, int iters, int window, bool sender);
  // Fan-in: ranks >= 1 send `iters` messages of `size` to rank 0 (window `window`) with no
  // flow control; rank 0 progresses its worker for `hold` without posting a receive, then
  // receives them all. Rank 0 returns what was waiting, unreceived, at the end of `hold`.
  struct Held {
    int messages = 0;
    std::size_t bytes = 0;
  };
  Held fanin(int ranks, std::size_t size, int iters, int window, std::chrono::milliseconds hold, bool receiver);
  // `window` ping-pongs in flight at once; returns seconds for `iters` round trips.
  double pingpong_window(int peer, std::size_t size, int iters, int window, bool initiator);
  // The two sides of `link` trade a last message, each progressing until it has the other's:
  // a send whose completion waits on the other side's progress (a rendezvous's acknowledgement)
  // is done before either goes back to its engine, which does not progress this worker.
  void settle(const Link& link);
  // One run of a row's baseline (sluice-perf's Cmd), a function per pattern (the tests' table
  // names them), between the sides of `link`; the driver's returns the figures. Sides beyond
  // the first two take part in fanin only.
  // am_lat and rpc_lat: the bytes there and back (am_lat: half the round trip).
  Figures run_am_lat(const Cmd& c, const Link& link);
  Figures run_rpc_lat(const Cmd& c, const Link& link);
  // read: 8 bytes there, the size back from the responder's block; write: the other way round.
  Figures run_read(const Cmd& c, const Link& link);
  Figures run_write(const Cmd& c, const Link& link);
  // rpc_rate: c.window ping-pongs in flight.
  Figures run_rpc_rate(const Cmd& c, const Link& link);
  // am_bw and bulk_bw: a stream, c.window in flight.
  Figures run_stream(const Cmd& c, const Link& link);
  // fanin: the receiver holds for kFaninHold (tests.h); in cs mode fanin has no raw part.
  Figures run_fanin(const Cmd& c, const Link& link);

 private:
  Figures round_trips(const Cmd& c, const Link& link, std::size_t there, std::size_t back, bool echo, double scale);
  RawUcx() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::perf
