// sluice-perf's two sides and how they reach each other.
//
// Rank mode (-m rank): rank 0 drives and reports, the other ranks answer, through
// Engine::peer(rank); the launcher's bootstrap introduced the engines. Client/server mode
// (-m cs): the client drives and reports, the server answers, each engine over the one peer it
// connected (Engine::connect) or accepted (Engine::listen): the main engine's, and the bounce
// baseline's when there is one. Under a launcher rank 0 is the server and publishes its address
// through the bootstrap; without one, --server and --connect say which side a process is.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include <sluice/sluice.h>

#include "mpi_baseline.h"
#include "options.h"
#include "raw_ucx.h"

namespace sluice::perf {

// The engines and baselines of one process.
struct Engines {
  std::unique_ptr<Engine> main;
  std::unique_ptr<Engine> bounce;    // --baseline bounce: SLUICE_RNDV=n
  std::unique_ptr<RawUcx> raw;       // --baseline ucx
  std::unique_ptr<MpiBaseline> mpi;  // --baseline mpi: the driver's jobs
};

// Creates them as `o` says: collectively in a launcher's job, as create_engine() and
// RawUcx::create() are. The raw and MPI baselines need the launcher's ranks (InvalidArgument
// without them).
absl::StatusOr<Engines> create_engines(Context& ctx, const Options& o);

// The largest payload a run of `o` moves: what the receiving side's landing buffer holds.
std::size_t largest_payload(const Options& o);

class Link {
 public:
  // 0 drives and reports (rank 0; cs: the client); 1 (and up, in rank mode) answer.
  int role() const { return role_; }
  // The sides taking part: the job's ranks, or 2.
  int size() const { return size_; }
  bool cs() const { return cs_; }
  // The other side's bootstrap rank, for the raw baseline's endpoints.
  int raw_peer() const { return raw_peer_; }
  // Who `e` reaches as `rank`: rank mode's e.peer(rank); cs: the other side, whatever `rank`.
  Peer* peer(Engine& e, int rank) const {
    if (!cs_) return e.peer(rank);
    return &e == bounce_ ? bounce_peer_ : main_peer_;
  }
  // Whether the other side is still there (cs: its peers are alive; rank mode: true).
  bool alive() const;
  // Who runs against whom, for the report's header.
  const std::string& sides() const { return sides_; }

 private:
  friend class Connector;
  friend absl::StatusOr<Link> connect_sides(Context& ctx, Engines& engines, Options& o);
  int role_ = 0, size_ = 2, raw_peer_ = 1;
  bool cs_ = false;
  Engine* bounce_ = nullptr;
  Peer* main_peer_ = nullptr;
  Peer* bounce_peer_ = nullptr;
  std::string sides_;
};

// Rank mode: the link as the job's ranks stand. cs mode: connects the two sides. The server
// listens, waits for the client's hello and takes its --rpc and sizes into `o` (the client's
// options decide the run); the client connects and says hello. InvalidArgument for a cs run
// whose side cannot be told (no launcher, no --server or --connect), FailedPrecondition when
// the client asks for a baseline the server has not got; otherwise what listen() and connect()
// return.
absl::StatusOr<Link> connect_sides(Context& ctx, Engines& engines, Options& o);

}  // namespace sluice::perf
