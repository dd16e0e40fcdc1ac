// The peer table (internal): every peer's record by its index, the one the peer puts in its
// tags to us. Ranks come first (made at init, their endpoints on first use); client/server peers
// follow, in indices reused once nothing of a gone client is left. It owns the records, the
// rank addresses, the gone lists and the Peer handles; the other components find peers here.
#pragma once

#include <cassert>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <sluice/engine.h>

#include "am/peer_data.h"

namespace sluice::detail {

class EngineCore;

class PeerTable {
 public:
  explicit PeerTable([[maybe_unused]] EngineCore& e) { assert(&engine() == &e); }
  PeerTable(const PeerTable&) = delete;
  PeerTable& operator=(const PeerTable&) = delete;

  // Init: the job's ranks and their worker addresses; every rank's record and Peer exist from
  // here on, so that any thread may look one up (handle()).
  void add_ranks(std::vector<std::string> addresses);
  int ranks() const { return ranks_; }
  std::size_t size() const { return peers_.size(); }
  // The records that hold a peer: all but the gone clients' (which wait to be reused).
  std::size_t live() const { return peers_.size() - gone_cs_.size(); }

  // Any thread: the Peer of `rank`, or nullptr (logged) for a rank outside the job.
  Peer* handle(int rank) const {
    if (static_cast<std::size_t>(rank) < rank_handles_.size()) [[likely]]  // a negative rank wraps: too large
      return rank_handles_[static_cast<std::size_t>(rank)];
    return no_such_rank(rank);
  }
  // The Peer of the record at `id` (a Message's sender).
  Peer* handle_of(std::uint32_t id) { return peers_[id]->handle(); }

  // Lookups, inline: every message passes here. The peer at an index known to hold one (a
  // Message's, an operation's); the peer of `rank`, nullptr outside the job; the peer at
  // `index` (a tag's, a link's), nullptr when there is none.
  PeerData& at(std::uint32_t id) { return *peers_[id]; }
  const PeerData& at(std::uint32_t id) const { return *peers_[id]; }
  PeerData* by_rank(int rank) {
    if (rank < 0 || rank >= ranks_) return nullptr;
    return peers_[static_cast<std::size_t>(rank)].get();
  }
  PeerData* by_index(std::uint32_t index) { return index < peers_.size() ? peers_[index].get() : nullptr; }
  // Every peer in index order; by index, so that `fn` may admit a client (the table grows).
  template <typename Fn>
  void for_each(Fn&& fn) {
    for (std::size_t i = 0; i < peers_.size(); ++i)
      if (peers_[i]) fn(*peers_[i]);
  }
  template <typename Pred>
  bool any(Pred&& pred) const {
    for (const auto& p : peers_)
      if (p && pred(*p)) return true;
    return false;
  }

  // A rank's endpoint, made on first use from its address.
  absl::Status ensure_endpoint(PeerData& p);
  // What the front door learns of a client/server peer: its name, its index for us, the
  // endpoint of the link chosen for it.
  static void set_name(PeerData& p, std::string name) { p.name_ = std::move(name); }
  static void set_remote_index(PeerData& p, std::uint32_t index) { p.remote_index_ = index; }
  static void set_endpoint(PeerData& p, Endpoint&& ep) { p.ep_ = std::move(ep); }
  // The close: every endpoint goes (after their operations have completed).
  void drop_endpoints() {
    for_each([](PeerData& p) { p.ep_ = Endpoint(); });
  }

  // A client/server peer: a new record (a gone client's index when one is reusable); one that
  // never got going (its connect or admission failed), gone; one that failed, gone once
  // nothing of it is left.
  PeerData& add_client();
  void abandon(PeerData& p, const std::string& why);
  void gone(PeerData& p) {
    if (p.rank_ < 0) gone_cs_.push_back(p.id_);
  }

  // UCX's callback for an endpoint that failed (`arg` is its PeerData): recorded, handled
  // after progress returns (endpoints_failed()).
  static void on_ep_error(void* arg, int ucs_status);
  // Endpoints UCX declared failed (from its callback), handled after progress returns.
  void endpoint_failed(std::uint32_t id) { failed_eps_.push_back(id); }
  bool take_failed_endpoint(std::uint32_t* id) {
    if (failed_eps_.empty()) return false;
    *id = failed_eps_.back();
    failed_eps_.pop_back();
    return true;
  }
  bool endpoints_failed() const { return !failed_eps_.empty(); }

 private:
  Peer* no_such_rank(int rank) const;
  PeerData& init_client(PeerData& p);
  bool reusable(const PeerData& p) const;
  static PeerData dead_stand_in() {
    PeerData p;
    LinkControl::abandoned(p.link, "gone: its index serves another client");
    return p;
  }

  EngineCore& engine() const;                     // the engine holding this (EngineCore::of)
  std::vector<std::unique_ptr<PeerData>> peers_;  // ranks first, then client/server peers
  int ranks_ = 0;                                 // read on every lookup
  std::vector<std::string> addresses_;            // by rank
  std::vector<Peer*> rank_handles_;               // by rank; fixed once add_ranks() returns
  std::vector<std::uint32_t> failed_eps_;         // peers whose endpoint UCX declared failed
  // Client/server peers that are gone: their indices serve later clients once nothing of them
  // is left (reusable()). A gone client's Peer handle is kept, pointing at gone_peer_, so that
  // one the application still holds answers kUnavailable instead of reaching the new client.
  std::deque<std::uint32_t> gone_cs_;
  PeerData gone_peer_ = dead_stand_in();
  std::vector<std::unique_ptr<Peer>> gone_handles_;
};

}  // namespace sluice::detail
