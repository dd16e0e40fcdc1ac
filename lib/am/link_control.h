// Link control (internal): the life of each connection. HELLO both ways (what we grant the
// peer, what it grants us), REJECT, BYE and the orderly close, PING/PONG heartbeats, and the
// timers that end a link: the handshake's deadline, silence beyond SLUICE_PEER_TIMEOUT, a
// closed front-door link's grace. It owns each peer's link part; the sender carries what it
// decides to send.
#pragma once

#include <cassert>
#include <cstdint>
#include <span>
#include <string>

#include <absl/functional/function_ref.h>
#include <sluice/engine.h>

#include "flow/visits.h"
#include "wire/wire.h"

namespace sluice::detail {

class EngineCore;
struct PeerData;

enum class PeerState : std::uint8_t { kNew, kConnecting, kReady, kDead };
constexpr const char* to_string(PeerState s) {
  constexpr const char* kNames[] = {"new", "connecting", "ready", "dead"};
  return kNames[static_cast<int>(s)];
}

// A peer's link part: written by LinkControl alone, read by anyone.
class LinkState {
 public:
  // Where the link is: new, connecting, ready, dead.
  PeerState state() const { return state_; }
  // Bumped when the peer restarts or its index serves a new client: operations carry it, and
  // the completions of an older epoch's are ignored.
  std::uint64_t epoch() const { return epoch_; }
  bool hello_sent() const { return hello_sent_; }
  bool hello_received() const { return hello_received_; }
  // Its BYE came: it closes once everything up to the sequence the BYE carried is in.
  bool bye_received() const { return bye_received_; }
  // Why it failed (or why its link or endpoint went: the cause its failure reports).
  const std::string& fail_reason() const { return fail_reason_; }
  // Its front-door link closed and its grace runs (LinkControl::link_lost).
  bool lost() const { return lost_at_ != Clock::time_point::max(); }
  // Its endpoint's force close did not finish: the transport may still call back for it.
  bool close_pending() const { return close_pending_; }
  // Visited on every timer tick (LinkControl::tick); false while it sleeps until a deadline.
  bool watched() const { return watched_; }
  // We dialed it: a client's link to its server.
  bool dialed() const { return dialed_; }

 private:
  friend class LinkControl;
  PeerState state_ = PeerState::kNew;
  std::uint64_t epoch_ = 0;
  std::uint64_t incarnation_ = 0;  // the peer's, from its HELLO
  bool hello_sent_ = false;
  bool hello_received_ = false;
  Clock::time_point hello_deadline_{};
  Clock::time_point early_since_{};  // data of it waits for its HELLO since
  Clock::time_point last_heard_{};
  bool ping_outstanding_ = false;
  Clock::time_point ping_sent_{};
  bool bye_sent_ = false;
  bool bye_received_ = false;
  std::uint64_t bye_seq_ = 0;
  std::string fail_reason_;
  bool close_pending_ = false;
  bool watched_ = false;
  // We dialed it (a client's link to its server): its heartbeats keep the link alive, ours
  // are the fallback (LinkControl::beat).
  bool dialed_ = false;
  // Client/server: when its front-door link closed (its process ended, or it is closing: its
  // BYE may still be on the way); it fails kLinkGrace later unless it has closed by then.
  Clock::time_point lost_at_ = Clock::time_point::max();
};

class LinkControl {
 public:
  explicit LinkControl([[maybe_unused]] EngineCore& e) { assert(&engine() == &e); }
  LinkControl(const LinkControl&) = delete;
  LinkControl& operator=(const LinkControl&) = delete;

  // ---- the handshake and control messages (link_control.cpp)
  // A new rank peer: its endpoint, then our HELLO, answered within SLUICE_CONNECT_TIMEOUT.
  void start_handshake(PeerData& p);
  // The peer connects: its HELLO must come by `deadline`. `dialed`: we connected to it (the
  // client's side of a client/server link).
  void connecting(PeerData& p, Clock::time_point deadline, bool dialed = false);
  // SLUICE_CONNECT_TIMEOUT from now (max when infinite).
  Clock::time_point connect_deadline() const;
  bool send_hello(PeerData& p);
  void handle_ctrl(PeerData& p, const wire::Header& h, std::span<const std::byte> body);
  // After the peer's BYE: closes it once every message it sent before is in (delivered, and
  // no payload of it still landing).
  void close_after_bye(PeerData& p);
  void send_bye(PeerData& p);
  // Refuses the connection: REJECT with the reason, then the peer fails (ResourceExhausted).
  void reject(PeerData& p, const std::string& why);

  // ---- timers (link_timers.cpp)
  // A peer with something for the timers (traffic, a handshake, a queue, a closed link) is
  // watched: visited on every tick. A quiet one sleeps until its next heartbeat or its silence
  // ends it, so a tick costs the watched peers, not all of them.
  void watch(LinkState& l, std::uint32_t index) {
    if (l.watched_) return;
    l.watched_ = true;
    watch_index(index);
  }
  // Runs the watched peers' timers and the sleepers' whose deadline came: the link's own
  // (expired), then, for a ready peer, `visit`, which does the rest and says whether the peer is
  // quiet (nothing owed, held or queued). A quiet, ready link goes to sleep.
  void tick(Clock::time_point now, bool away, absl::FunctionRef<bool(PeerData&)> visit);
  // Some peer is watched (the next tick comes at the tick interval); the earliest sleeper's
  // deadline otherwise.
  bool busy() const { return visits_.busy(); }
  Clock::time_point next_due() const { return visits_.next_due(); }
  std::size_t watched() const { return visits_.watched(); }
  // Ends the link when its time is up: no handshake by its deadline, data that waited a
  // heartbeat for a HELLO, a closed link's grace, silence (`away`: nobody progressed this
  // engine for a while, which is no silence of the peer's). True when the peer is done for
  // this tick.
  bool expired(PeerData& p, Clock::time_point now, bool away);
  // A heartbeat to a peer silent for SLUICE_HEARTBEAT.
  void keep_alive(PeerData& p, Clock::time_point now);

  // ---- what others learn and tell
  // A message from the peer at `index` arrived (every message passes here): its timers are
  // watched again.
  void heard(LinkState& l, std::uint32_t index, Clock::time_point now) {
    l.last_heard_ = now;
    if (!l.watched_) [[unlikely]]
      watch(l, index);
  }
  // A control message arrived. A heartbeat (PING, PONG) leaves a sleeping peer asleep: its
  // next deadline is worked out from this when it comes. Any other watches it, as data does.
  void heard_ctrl(LinkState& l, std::uint32_t index, std::uint16_t kind, Clock::time_point now) {
    if (kind == wire::kPing || kind == wire::kPong) l.last_heard_ = now;
    else heard(l, index, now);
  }
  // Data of a connecting peer waits for its HELLO (since `now`, unless it waited already).
  static void early(LinkState& l, Clock::time_point now) {
    if (l.early_since_ == Clock::time_point{}) l.early_since_ = now;
  }
  static void not_early(LinkState& l) { l.early_since_ = {}; }
  // The transport failed the peer's endpoint (`why`); a link that closed said why already.
  static void endpoint_failed(LinkState& l, std::string why);
  // The peer's front-door link closed (`why`): a ready peer fails kLinkGrace after `now`
  // unless it closes first (true); any other is for the caller to fail (false).
  bool link_lost(PeerData& p, const std::string& why, Clock::time_point now);
  // The peer failed (`reason`): dead; its endpoint's force close may not have finished.
  static void failed(LinkState& l, const std::string& reason);
  // A client/server peer that never got going (`why`): dead.
  static void abandoned(LinkState& l, const std::string& why) {
    l.state_ = PeerState::kDead;
    l.fail_reason_ = why;
  }
  // A gone client's index serves a new one: the new link's epoch follows the old one's.
  static void succeed(const LinkState& old, LinkState& fresh) { fresh.epoch_ = old.epoch_ + 1; }
  static void close_pending(LinkState& l, bool pending) { l.close_pending_ = pending; }

 private:
  void handle_hello(PeerData& p, const wire::Hello& hello);
  // A HELLO from a peer we knew: whatever was towards its old incarnation is over.
  void restart(PeerData& p, const wire::Hello& hello);
  void maybe_ready(PeerData& p);
  void on_bye(PeerData& p, const wire::Header& h);
  void on_pong(PeerData& p);
  // Drops what waited for a HELLO that did not come.
  void drop_early(PeerData& p);
  // A quiet link's next deadline: its heartbeat, or its silence's end.
  Clock::time_point quiet_until(const LinkState& l) const;
  // How long the link may be silent before we ping it; and the quantum its pings are batched
  // by (a quarter of SLUICE_HEARTBEAT).
  Duration beat(const LinkState& l) const;
  Duration batch() const;
  [[gnu::noinline]] void watch_index(std::uint32_t index);

  EngineCore& engine() const;  // the engine holding this (EngineCore::of)
  VisitSchedule visits_;
};

}  // namespace sluice::detail
