// The peer table: rank peers made at init, client/server peers in indices reused once nothing
// of a gone one is left, rank endpoints made on first use.

#include <algorithm>

#include <absl/strings/str_format.h>

#include "am/peer_table.h"

#include "am/engine_core.h"
#include "core/log.h"

namespace sluice::detail {

void PeerTable::add_ranks(std::vector<std::string> addresses) {
  ranks_ = static_cast<int>(addresses.size());
  addresses_ = std::move(addresses);
  peers_.resize(addresses_.size());
  rank_handles_.reserve(addresses_.size());
  for (int rank = 0; rank < ranks_; ++rank) {
    auto& p = peers_[static_cast<std::size_t>(rank)];
    p = std::make_unique<PeerData>();
    p->id_ = static_cast<std::uint32_t>(rank);
    p->rank_ = rank;
    p->name_ = absl::StrFormat("rank %d", rank);
    p->handle_.reset(new Peer(&engine(), p.get(), p->id_, rank));
    engine().rpc_server_.grant(*p, engine().config_.rpc_window);
    p->remote_index_ = static_cast<std::uint32_t>(engine().rank());
    rank_handles_.push_back(p->handle_.get());
  }
}

Peer* PeerTable::no_such_rank(int rank) const {
  SLUICE_LOG_RATE_LIMITED(kWarn, "api", "Engine::peer(%d): no such rank (the job has %d): nullptr", rank, ranks_);
  return nullptr;
}

void PeerTable::on_ep_error(void* arg, int ucs_status) {
  auto* p = static_cast<PeerData*>(arg);
  (void)ucs_status;
  // Recorded here, handled after progress returns: never change peer state inside UCX.
  std::string why = p->ep().failure();
  LinkControl::endpoint_failed(
      p->link, why.empty() ? absl::StrFormat("transport error: %s", transport_error_name(ucs_status)) : why);
  p->handle()->engine_->peers_.endpoint_failed(p->id());
}

absl::Status PeerTable::ensure_endpoint(PeerData& p) {
  if (p.ep().valid()) return absl::OkStatus();
  if (p.rank() < 0) return absl::UnavailableError("client/server peer without an endpoint");
  SLUICE_ASSIGN_OR_RETURN(p.ep_, engine().worker_->connect(addresses_[p.id()], &PeerTable::on_ep_error, &p));
  return absl::OkStatus();
}

// A gone client's index may serve a new one once nothing refers to the old one any more: no
// operation of it in the transport, no message of it the application holds, no call to it
// open, no endpoint callback still to come, nothing with its index in UCX's unexpected queue.
// Completions of the old incarnation then see a stale epoch.
bool PeerTable::reusable(const PeerData& p) const {
  if (p.state() != PeerState::kDead || p.link.close_pending() || p.rx.unreleased() != 0 || p.landings.landing() != 0 ||
      std::find(failed_eps_.begin(), failed_eps_.end(), p.id()) != failed_eps_.end())
    return false;
  // Its receive ops are the index's own and serve the next client (Receives::open) once their
  // cancellation has come back.
  for (const Op& op : engine().ops_)
    if (op.in_use && op.peer == p.id() && (op.kind != OpKind::kRx || op.recv.busy || op.recv.queued)) return false;
  if (engine().rpc_client_.has_calls_to(p)) return false;
  // Nothing of it may wait in UCX either: a later client numbers its messages from 1 again, and
  // a rendezvous payload tag (index and sequence) the old one left would match the new one's.
  constexpr std::uint64_t kIndexBits = std::uint64_t{wire::kIndexMask} << wire::kIndexShift;
  return !engine().worker_->has_unexpected(std::uint64_t{p.id()} << wire::kIndexShift, kIndexBits);
}

PeerData& PeerTable::add_client() {
  // The oldest gone clients first, a few per connection: one that stays unusable (a message of
  // it that UCX keeps) goes to the back instead of being looked at on every connection.
  for (std::size_t tries = std::min<std::size_t>(gone_cs_.size(), 16); tries > 0; --tries) {
    std::uint32_t id = gone_cs_.front();
    gone_cs_.pop_front();
    PeerData& old = *peers_[id];
    if (!reusable(old)) {
      gone_cs_.push_back(id);
      continue;
    }
    old.handle_->data_ = &gone_peer_;
    gone_handles_.push_back(std::move(old.handle_));
    PeerData fresh;
    fresh.id_ = old.id_;
    LinkControl::succeed(old.link, fresh.link);  // whatever of the old client still completes is stale
    Receives::carry(old, fresh);
    old = std::move(fresh);
    engine().c_.peers_reused->add();
    engine().receives_.revive_index(id);
    SLUICE_LOG(kDebug, "am", "client index %u serves a new client (%zu records, %zu gone)", id, peers_.size(),
               gone_cs_.size());
    return init_client(old);
  }
  auto p = std::make_unique<PeerData>();
  p->id_ = static_cast<std::uint32_t>(peers_.size());
  SLUICE_LOG(kDebug, "am", "client index %u is new (%zu gone, none free)", p->id(), gone_cs_.size());
  peers_.push_back(std::move(p));
  return init_client(*peers_.back());
}

PeerData& PeerTable::init_client(PeerData& p) {
  p.rank_ = -1;
  p.name_ = absl::StrFormat("client index %u", p.id());
  p.remote_index_ = wire::kUnassignedIndex;
  p.handle_.reset(new Peer(&engine(), &p, p.id_, -1));
  engine().rpc_server_.grant(p, engine().config_.rpc_window);
  return p;
}

void PeerTable::abandon(PeerData& p, const std::string& why) {
  LinkControl::abandoned(p.link, why);
  gone_cs_.push_back(p.id());
}

}  // namespace sluice::detail
