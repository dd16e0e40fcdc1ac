// Posted receives (internal): the receives each peer's messages land in, and what no posted
// receive takes. Each peer gets min(SLUICE_RX_POSTED, credits) exact receives on its EAGER tag
// under a key our HELLO gives it, and one more each time a re-posted receive finds its message
// already waiting in UCX, up to one per credit beyond those; a consumed one is re-posted at
// the start of the next progress call. Their slots and those of the peer's messages kept
// beyond their handlers stay within what its grant reserved (credits + min(SLUICE_RX_POSTED,
// credits)): a kept message may leave a receive unposted until it is released. A HELLO or
// REJECT from a peer with no receive of ours yet (CTRL-class) is taken from UCX's unexpected
// queue; so are a failed connection's stragglers, dropped.
#pragma once

#include <cassert>
#include <vector>

#include <sluice/engine.h>

#include "am/op.h"
#include "transport/transport.h"

namespace sluice::detail {

class EngineCore;
struct PeerData;

// A peer's posted receives: written by Receives alone, read by anyone.
class PostedFor {
 public:
  // The id our HELLO gave the peer for its EAGER tags to us; 0 while closed.
  std::uint64_t key() const { return key_; }
  // The tag its EAGER messages to us carry (the key's, kept beside it: every re-post uses it).
  std::uint64_t tag() const { return tag_; }
  const std::vector<Op*>& ops() const { return ops_; }
  // Receive slots reserved beyond those its credits reserve: min(SLUICE_RX_POSTED, credits).
  std::uint32_t reserved() const { return reserved_; }
  // Receives kept posted: from reserved() up to credits + reserved(), grown by demand.
  std::uint32_t want() const { return want_; }
  // Receive slots its receives and its kept messages hold now (at most credits + reserved()).
  std::uint32_t held() const { return held_; }
  // Receives left unposted while its kept messages hold their slots.
  std::size_t parked() const { return parked_.size(); }

 private:
  friend class Receives;
  std::vector<Op*> ops_;     // open from our HELLO until the peer fails
  std::vector<Op*> parked_;  // waiting for a slot the peer may hold (queued, not in unposted_)
  std::uint32_t reserved_ = 0;
  std::uint32_t want_ = 0;
  std::uint32_t held_ = 0;
  std::uint64_t key_ = 0;
  std::uint64_t tag_ = 0;
};

class Receives {
 public:
  // The largest CTRL-class message taken whole (a HELLO or REJECT is under 200 bytes).
  static constexpr std::size_t kContactMax = 1024;

  explicit Receives([[maybe_unused]] EngineCore& e) { assert(&engine() == &e); }
  Receives(const Receives&) = delete;
  Receives& operator=(const Receives&) = delete;

  // `n` slots reserved beyond the peer's credits (by the caller), and as many receives; then
  // open() posts them under a fresh key, with our HELLO. close() cancels them when the peer
  // fails (its key's stragglers purged for a while) and returns `n`.
  void reserve(PeerData& p, std::uint32_t n);
  void open(PeerData& p);
  // The peer's grant changed (Delivery has the new one): `n` extra slots from now on (reserved
  // by the caller). Receives beyond what it allows are cancelled (a message that lands first
  // is delivered).
  void resize(PeerData& p, std::uint32_t n);
  std::uint32_t close(PeerData& p);
  // An index reused for a new client keeps the old one's receive operations, and the count of
  // slots its kept messages still hold.
  static void carry(PeerData& from, PeerData& to);

  // The eager receive slots of a peer's receives and of its messages kept beyond their
  // handlers, counted here: whether it holds all it may (credits + reserved()); one more,
  // taken from the pool (kWouldBlock when the pool has none free; the caller checked full());
  // one back to the pool, which lets a receive parked for want of it be posted again.
  static bool full(const PeerData& p);
  Result take_slot(PeerData& p, Slot* out);
  void give_back(PeerData& p, Slot slot);

  // A receive completed: it goes back for re-posting (every received message passes here).
  void requeue(Op* op) {
    op->recv.busy = false;
    op->recv.queued = true;
    unposted_.push_back(op);
  }
  // Posts what waits to be posted (each progress call, before polling).
  void post() {
    if (!unposted_.empty()) [[unlikely]]
      post_waiting();
  }

  // CTRL-class messages no posted receive takes (first contact; also when a peer's data
  // arrives before its HELLO was taken).
  void take_first_contacts();
  // Stragglers of closed connections, taken and dropped (at max: all, now).
  void purge(Clock::time_point now) {
    if (!stale_tags_.empty()) [[unlikely]]
      purge_stragglers(now);
  }
  // Index `index` serves a peer again (a restarted rank, a new client): its old keyed tag is
  // purged for kStragglerWindow more, its any-id tags no longer (they would match the new
  // peer's payloads).
  void revive_index(std::uint32_t index);
  void on_contact_rx(Op* op, absl::StatusCode code, std::size_t length, std::uint64_t tag);

  // The engine's close: every receive cancelled; whether any is still posted or a message
  // taken from the unexpected queue still arrives; then whatever waits unmatched is dropped.
  void cancel_all();
  bool busy() const;
  bool contacts_arriving() const { return contact_inflight_ != 0; }
  void drop_unmatched();

 private:
  void post_waiting();
  // Receives the peer may hold slots for: one per credit, plus reserved().
  static std::uint32_t slots_for(const PeerData& p);
  // Parked receives go back to be posted (a slot came back, the grant or key changed).
  void unpark(PeerData& p);
  // The peer's receive operations made as many as want() (made when missing, cancelled
  // beyond), each under its key and queued to be posted unless it is.
  void fit(PeerData& p);
  // Operation `i` of the peer's under its key, queued to be posted unless it is (made first
  // when it is the next).
  void arm(PeerData& p, std::size_t i);
  void purge_stragglers(Clock::time_point now);
  // Receives one (a CTRL-class one is then handled at once); false when the transport
  // refused it (logged; UCX has let go of it).
  bool receive_unexpected(const Worker::Unexpected& u);

  // Tags of a failed peer's messages, taken out of UCX's unexpected queue and dropped while
  // it stays dead: its keyed EAGER tag, and its RNDV and REPLY tags (any id).
  struct Straggler {
    std::uint64_t tag;
    std::uint64_t mask;
    std::uint32_t index;
    Clock::time_point until;  // max while the peer is dead; a window once its index lives again
  };
  // How long messages a failed peer sent before it failed are purged from UCX (they arrive
  // within microseconds on shared memory; TCP may hold some back longer).
  static constexpr Duration kStragglerWindow = std::chrono::seconds(5);

  EngineCore& engine() const;          // the engine holding this (EngineCore::of)
  std::vector<Op*> unposted_;          // receive ops waiting to be posted
  std::vector<Op*> all_;               // every per-peer receive op (for close)
  std::vector<Straggler> stale_tags_;  // tags of failed connections, purged until `until`
  std::uint64_t next_key_ = 0;
  std::size_t contact_inflight_ = 0;
};

}  // namespace sluice::detail
