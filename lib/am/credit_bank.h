// The credit bank (internal): how much of the receive budget each peer holds as credits, and
// of the send budget as the reply slots held back for its RPC window. Every
// peer keeps a floor of kFloor credits (a request and its reply can always go); our HELLO
// grants up to SLUICE_CREDITS as the budget allows; beyond that the budget is a reserve lent by
// demand (a peer's GRANT says how many of its messages wait for credits), up to
// SLUICE_CREDITS_MAX, and taken back from idle peers while another peer waits for it or the
// budget cannot hold a full grant: they are asked to come down to the floor (a lower target in
// our GRANT) and give back what they do not use. The RPC window follows the same rule on the
// send budget (2 reply slots held back per call of the window): granted up to SLUICE_RPC_WINDOW
// as the budget allows, widened back to it when calls wait, recalled to 1 from idle peers while
// another waits or a HELLO got less; it shrinks once the peer says it keeps to the lower
// window. docs/flow-control.md, "Credits that follow demand".
#pragma once

#include <cassert>
#include <cstdint>
#include <vector>

#include <sluice/engine.h>

#include "wire/wire.h"

namespace sluice::detail {

class EngineCore;
class PoolClass;
struct PeerData;

// A peer's loan: written by CreditBank alone, read by anyone. Its grant, as the receive side
// counts it (ReceiveState::granted()), is lent() - given_up().
class LoanState {
 public:
  // Credits granted it in all since our HELLO (the HELLO's included), and given back of those.
  std::uint64_t lent() const { return lent_; }
  std::uint64_t given_up() const { return given_up_; }
  // How many it may keep (our GRANTs say so).
  std::uint32_t target() const { return target_; }
  // Credits it asked for that the budget could not lend yet (0: none).
  std::uint32_t wanted() const { return wanted_; }
  // The RPC window we grant it now (our GRANTs say so), and calls of it waiting for a wider
  // one that the send budget could not hold back replies for yet.
  std::uint32_t window() const { return window_; }
  std::uint32_t window_wanted() const { return window_wanted_; }

 private:
  friend class CreditBank;
  std::uint64_t lent_ = 0;
  std::uint64_t given_up_ = 0;
  std::uint32_t target_ = 0;
  std::uint32_t wanted_ = 0;
  std::uint32_t window_ = 0;
  std::uint32_t window_wanted_ = 0;
  // The reclaim walk's view of its traffic: its messages received when it was last seen
  // sending, and since when it has sent nothing.
  std::uint64_t seen_msgs_ = 0;
  Clock::time_point quiet_since_{};
  std::uint32_t cap_ = 0;  // CreditBank::credit_cap(p), once asked (0: not yet)
};

class CreditBank {
 public:
  static constexpr std::uint32_t kFloor = 2;
  // Newcomers whose floors a HELLO's grant above its own floor leaves room for (at most a
  // sixteenth of the budget): a storm of 1,000 connects lands before any peer has been quiet
  // long enough to be recalled, so the floors must already be there.
  static constexpr std::size_t kNewcomers = 1024;

  explicit CreditBank([[maybe_unused]] EngineCore& e) { assert(&engine() == &e); }
  CreditBank(const CreditBank&) = delete;
  CreditBank& operator=(const CreditBank&) = delete;

  // The most a peer may be granted: credits (SLUICE_CREDITS_MAX) and RPC window
  // (SLUICE_RPC_WINDOW_MAX), never below the HELLO's (SLUICE_CREDITS, SLUICE_RPC_WINDOW).
  std::uint32_t credit_cap() const;
  std::uint32_t window_cap() const;
  // What `p` may be lent: credit_cap(), and, for a client whose messages come through our
  // shared-memory FIFO, no more than that FIFO holds from one sender
  // (TransportContext::fifo_credits): what a sender leaves in a dead peer's full FIFO keeps
  // that peer's shared memory mapped in it for good.
  std::uint32_t credit_cap(PeerData& p) const;
  // Our HELLO's grant to `p`, reserved with its posted receives: SLUICE_CREDITS when the budget
  // has room, less when not, at least kFloor; 0 when even that cannot be had (nothing reserved).
  std::uint32_t open(PeerData& p, Clock::time_point now);
  // Our HELLO's RPC window for `p`, its reply slots held back: SLUICE_RPC_WINDOW when the send
  // budget has room, less when not; 0 when not even 1 fits (nothing held back).
  std::uint32_t open_window(PeerData& p);
  // The peer failed: its grant and posted receives go back to the budget (its reply slots
  // go back with the sender's release_held).
  void close(PeerData& p);
  // What its GRANT says of our loans: credits of ours it gave back in all, messages of its
  // that wait for credits, the window of ours it keeps to, calls of its that wait for the
  // window. False for a count no correct peer sends (nothing changes).
  bool on_grant(PeerData& p, const wire::Grant& g);
  // Each timer tick: peers waiting for credits are served as the budget allows; while some
  // still wait, or since a HELLO was short until a full grant fits again, idle peers are asked
  // to come down to the floor (a walk over the peers, at most one per quarter heartbeat).
  void tick(Clock::time_point now);
  // Whether the next tick has work: demand waiting, or a walk to come (the timer keeps ticking).
  bool busy() const;

  // Peers whose demand waits for the budget (credits, or a wider window).
  std::size_t waiting() const { return waiting_.size() + window_waiting_.size(); }
  // Peers asked to keep more than the floor (the walk looks at those).
  std::uint32_t lenders() const { return lenders_; }

 private:
  // Lends `p` `want` more credits (at least its grant again), as far as SLUICE_CREDITS_MAX and
  // the budget allow;
  // what cannot be had now is remembered (LoanState::wanted) and served later.
  void lend(PeerData& p, std::uint32_t want);
  // `p`'s grant becomes `grant`: the budget's reservation, its posted receives and the grant
  // the receive side checks follow. The caller made sure the budget has room for a rise.
  void set_grant(PeerData& p, std::uint32_t grant);
  void set_target(PeerData& p, std::uint32_t target);
  // Receive slots `grant` credits take: the credits' and the posted receives'.
  std::uint32_t posted_for(std::uint32_t grant) const;
  std::size_t cost(std::uint32_t grant) const { return std::size_t{grant} + posted_for(grant); }
  // The largest grant whose cost() fits in `slots` (cost grows with the grant).
  std::uint32_t most_for(std::size_t slots) const;
  void serve_waiting();
  // Recalls idle peers' credits (`credits`) and windows (`windows`) to the floor.
  void reclaim(Clock::time_point now, bool credits, bool windows);
  // Credits of ours it gave back in all (false: more than it could).
  bool credits_back(PeerData& p, std::uint64_t given_up);
  void note_window(PeerData& p, std::uint32_t window);
  // Slots of `c` a HELLO leaves for newcomers' floors of `floor` slots each.
  static std::size_t for_newcomers(const PoolClass& c, std::size_t floor);
  // Slots of `c` a HELLO may take beyond a floor of `floor` slots.
  static std::size_t beyond_floor(const PoolClass& c, std::size_t floor);
  // The window: widened by up to `want` calls as the send budget allows (the rest remembered);
  // set to `window` with its reply slots (reserved first when it grows); the peer kept to
  // `seen`: a lower window takes effect and its slots go back.
  void widen(PeerData& p, std::uint32_t want);
  void set_window(PeerData& p, std::uint32_t window);
  void window_kept(PeerData& p, std::uint32_t seen);

  EngineCore& engine() const;                  // the engine holding this (EngineCore::of)
  std::vector<std::uint32_t> waiting_;         // peers with wanted() != 0, by index
  std::vector<std::uint32_t> window_waiting_;  // peers with window_wanted() != 0
  std::uint32_t lenders_ = 0;                  // peers whose target is above kFloor
  std::uint32_t window_lenders_ = 0;           // peers whose window is above 1
  bool short_ = false;                         // a HELLO granted less than SLUICE_CREDITS
  bool window_short_ = false;                  // a HELLO granted less than SLUICE_RPC_WINDOW
  Clock::time_point next_walk_{};              // the earliest next recall walk
};

}  // namespace sluice::detail
