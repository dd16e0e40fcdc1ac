// Landings (internal): where large payloads arrive. A rendezvous payload lands in the memory
// its handler's sink gives, else in receive-pool memory; one the receive budget cannot hold
// now waits, oldest first, its bytes still at the sender, until messages are released; one it
// can never hold is declined (DECLINE) without failing its peer. Bounce mode (SLUICE_RNDV=n)
// reassembles pieces here. Landings owns each peer's landing part and the waiting list.
#pragma once

#include <cassert>
#include <deque>
#include <span>
#include <string>

#include <sluice/engine.h>

#include "am/op.h"
#include "wire/wire.h"

namespace sluice::detail {

class EngineCore;
struct PeerData;

// A peer's landing part: written by Landings alone, read by anyone.
class LandingsFrom {
 public:
  // Its messages wait: an ordered payload lands (or waits for memory), or the peer's link
  // is closing and nothing more of it is delivered (hold()).
  bool blocked() const { return blocked_; }
  // Payloads of it landing now.
  std::uint32_t landing() const { return landing_; }
  // Nothing of it lands, waits or holds its messages back.
  bool quiet() const { return landing_ == 0 && parked_ == 0 && !blocked_; }

 private:
  friend class Landings;
  bool blocked_ = false;
  std::uint32_t landing_ = 0;  // exact receives posted for its payloads
  std::uint32_t parked_ = 0;   // its payloads in Landings' waiting list
  Message frag_;               // bounce mode: the payload being reassembled
  std::size_t frag_received_ = 0;
  std::deque<std::pair<std::uint64_t, std::string>> declines_;  // DECLINEs to send: sequence, why
};

class Landings {
 public:
  explicit Landings([[maybe_unused]] EngineCore& e) { assert(&engine() == &e); }
  Landings(const Landings&) = delete;
  Landings& operator=(const Landings&) = delete;

  // A rendezvous announcement (its payload waits at the sender), or a bounce-mode piece.
  void start_rndv(PeerData& p, Message&& m, const wire::Header& h, bool ordered);
  void assemble_fragment(PeerData& p, Message&& m, const wire::Header& h);
  void on_rndv_done(Op* op, absl::StatusCode code, std::size_t length);
  // A DECLINE from the peer: with a reason, the send of that payload completes with
  // ResourceExhausted (and is answered); without, its answer to ours (the payload is dropped).
  void on_decline(PeerData& p, const wire::Header& h, std::span<const std::byte> body);
  // Sends the peer's waiting DECLINEs (ours, and answers to its), one at a time.
  void send_declines(PeerData& p);
  // Payloads waiting for memory land when the receive pool has had slots back since the last
  // try (`any`: try whenever some wait).
  void retry(bool any) {
    if (!parked_.empty() && (any || pool_returns() != parked_at_returns_)) [[unlikely]]
      retry_waiting();
  }
  std::size_t waiting() const { return parked_.size(); }

  // Nothing more of the peer is delivered until it fails (its link closes: transfer_failed).
  void hold(PeerData& p);
  // The peer failed: what of it waits goes, its reassembly and DECLINEs with it.
  void peer_failed(PeerData& p);
  // The peer restarted: none of its payloads is landing any more (their completions are stale).
  void peer_restarted(PeerData& p);
  // The engine's close, once every receive has completed.
  void close();

 private:
  std::uint64_t pool_returns() const;
  void retry_waiting();
  void post_landing(PeerData& p, Message&& m, std::span<std::byte> dest, bool ordered);
  // Gives back an announcement's receive slot and its credit once its payload has a landing;
  // the user header moves to the heap.
  void free_announcement(PeerData& p, Message& m);
  // Where a payload lands: the handler's sink (asked once per payload), else receive-pool
  // memory. Empty when the receive budget has no room now, or never will (the peer failed).
  std::span<std::byte> sink_landing(Message& m, std::size_t size);
  // `frag`: a bounce-mode message, whose peer fails when it can never land (others are declined).
  std::span<std::byte> pool_landing(PeerData& p, Message& m, std::size_t size, bool frag);
  // The sink's buffer, else pool memory unless landings already wait (they go first).
  std::span<std::byte> landing_for(PeerData& p, Message& m, std::size_t size, bool frag);
  // Refuses one announced payload the receive budget can never hold (`why`), not its peer.
  void decline_landing(PeerData& p, Message& m, const std::string& why);
  // Posts a receive of no bytes for the peer's payload `seq`: taken and dropped.
  void discard_payload(PeerData& p, std::uint64_t seq);
  void park(PeerData& p, Message&& m, const wire::Header& h, bool ordered);
  void start_fragments(PeerData& p, Message&& m, std::span<std::byte> dest);
  void add_fragment(PeerData& p, std::size_t piece);

  // A payload whose landing does not fit the receive budget now waits, its bytes at the
  // sender, until messages are released; in order, oldest first. An ordered one holds back
  // the rest of its peer's messages meanwhile.
  struct Parked {
    std::uint32_t peer;
    Message message;
    wire::Header header;  // a fragment's first piece (bounce mode), or a rendezvous announcement
    bool ordered;
  };
  EngineCore& engine() const;  // the engine holding this (EngineCore::of)
  std::deque<Parked> parked_;
  std::uint64_t parked_at_returns_ = 0;  // the receive pool's returns() when last retried
};

}  // namespace sluice::detail
