// The sender (internal): everything this engine puts on the wire. It owns each peer's send
// part (credits, sequence numbers, the send queue, control-message buffers), packs messages
// into send-pool slots, sends small ones inline, coalesces queued ones, spends credits, and
// completes sends. Link control, the RPC client and server and the landings ask it to send.
#pragma once

#include <array>
#include <cassert>
#include <deque>
#include <span>
#include <string>

#include <sluice/engine.h>

#include "am/op.h"
#include "flow/flow.h"
#include "wire/wire.h"

namespace sluice::detail {

class EngineCore;
struct PeerData;

// A peer's send part: written by Sender alone, read by anyone.
class SendsTo {
 public:
  const SendCredits& credits() const { return credits_; }
  // Our EAGER tag to it (its index for us, the key its HELLO gave).
  std::uint64_t tag() const { return tag_; }
  // The last sequence handed to the transport (BYE carries it).
  std::uint64_t sent_seq() const { return sent_seq_; }
  // Messages waiting in the send queue (an entry may carry several), and its entries.
  std::size_t queued() const { return queued_; }
  std::size_t entries() const { return queue_.size(); }
  bool waiting() const { return !queue_.empty(); }

 private:
  friend class Sender;
  SendCredits credits_;
  std::uint64_t tag_ = 0;  // our EAGER tag to it (its index for us, the key its HELLO gave)
  std::uint64_t next_seq_ = 1;
  std::uint64_t sent_seq_ = 0;
  std::deque<Pending> queue_;
  std::size_t queued_ = 0;
  std::uint32_t reply_reserved_ = 0;  // send slots held back for replies to it (2 x its RPC window)
  bool asked_ = false;                // we asked for credits (GRANT with waiting) since the last tick or loan
  // Since when messages wait in the queue for credits the peer holds (logged once per such
  // stretch when it lasts a heartbeat interval), and the credit stalls then.
  Clock::time_point starved_since_{};
  std::uint64_t starved_stalls_ = 0;
  bool starved_logged_ = false;
};

class Sender {
 public:
  explicit Sender([[maybe_unused]] EngineCore& e) { assert(&engine() == &e); }
  Sender(const Sender&) = delete;
  Sender& operator=(const Sender&) = delete;

  // ---- sending (sender.cpp; the inline path in send_now.h)
  // Peer::send: inline when nothing waits, else packed and queued (or coalesced). Inlined into
  // Peer::send and EngineCore::send, its callers (sender.cpp).
  Result send(PeerData& p, HandlerId h, std::span<const std::byte> header, std::span<const std::byte> payload,
              SendCallback&& cb, PayloadCopy copy, void* memh = nullptr);
  // send() beyond the inline send (out of line): its refusals, a send packed into a slot,
  // queued, coalesced or fragmented. `tried_inline`: send() tried the inline send already.
  Result send_queued(PeerData& p, HandlerId h, std::span<const std::byte> header, std::span<const std::byte> payload,
                     SendCallback&& cb, PayloadCopy copy, void* memh, bool tried_inline);
  // Sends a small message at once when nothing has to wait (see kInlineMax). False when it
  // cannot, with nothing changed: the caller takes the ordinary path, which queues, or meets
  // and reports the transport's error.
  bool send_inline(PeerData& p, const Outgoing& m);
  // A completion for a message that left inline: runs `cb` from progress(), as every
  // completion does.
  void complete_inline(std::uint32_t peer, SendCallback&& cb);
  // Packs `m` (its payload inline) into a send-pool slot with a full header announcing
  // `payload_len` bytes.
  Result pack(PeerData& p, const Outgoing& m, std::uint32_t payload_len, Op** out);
  // Packs an eager message, or a rendezvous announcement plus its payload operation
  // (`*payload`, nullptr for eager). Not for bounce mode's pieces.
  Result pack_message(PeerData& p, const Outgoing& m, PayloadCopy copy, Op** header, Op** payload);
  Result prepare_payload(Op* op, std::span<const std::byte> payload, PayloadCopy copy);
  // Bounce mode: `m`'s payload in pieces through send-pool slots.
  // `cb` is taken only when the first piece is (kWouldBlock leaves it with the caller).
  Result send_fragmented(PeerData& p, const Outgoing& m, SendCallback&& cb, bool ends_reply = false);
  // Sequences a packed message and sends it, or queues it for credits or the handshake.
  Result enqueue(PeerData& p, Op* header, Op* payload);
  // Sends a packed, queued message inline when nothing has to wait (frees `header`); false
  // when it must take the ordinary path.
  bool send_packed_now(PeerData& p, Op* header);
  // Sends what the queue holds while credits last (requests waiting for a slot join first).
  void flush(PeerData& p);
  void on_send_done(Op* op, absl::StatusCode code);

  // ---- credits and a failed peer's sends (send_control.cpp)
  // The peer's HELLO: our tag to it and the credits it granted.
  void connect(PeerData& p, std::uint64_t tag, std::uint32_t credits);
  // `n` send slots held back for replies to the peer (taken from the send budget by the caller).
  void hold_replies(PeerData& p, std::uint32_t n);
  // Credits the peer returned on a message (false: more than granted, a protocol error).
  // Inline: most messages carry some.
  static bool credits_back(SendsTo& tx, std::uint16_t n) { return tx.credits_.give_back(n); }
  // A heartbeat's count of the credits the peer returned in all, against ours (flow.h).
  void reconcile_credits(PeerData& p, std::uint64_t peer_returned);
  // Loans (docs/flow-control.md): the peer's GRANT (false: a grant past SendCredits::kMaxGrant);
  // unspent credits above its target given back (then a GRANT says so); our queue waits
  // for credits: a GRANT asks for more, once per tick or loan.
  bool on_loan(PeerData& p, const wire::Grant& g);
  void settle(PeerData& p);
  void ask(PeerData& p);
  // Logs, once per stretch of a heartbeat interval or longer, that our messages wait for
  // credits the peer holds.
  void watch_starved(PeerData& p, Clock::time_point now);
  // The peer restarted: credits and sequence numbers start over.
  void restart(PeerData& p);
  // The peer failed (fail_peer's order): queued messages complete with `status`; later the sends
  // the transport forgot complete too; last the reply slots held back go back to the budget.
  void drop_queued(PeerData& p, const absl::Status& status);
  // Queued messages (or requests) that never reached the transport complete with `status`.
  void drop_queue(PeerData& p, std::deque<Pending>& q, const absl::Status& status);
  void complete_stuck(PeerData& p, const absl::Status& status);
  void release_held(PeerData& p);
  // Sends handed to the transport and not completed.
  std::size_t inflight() const { return inflight_; }

 private:
  // Writes the wire header of the next message to `p` (its sequence number, the credits we
  // owe it; the compact header when `compact` (takes_compact), else the full one with our
  // acknowledgement), the user header and the payload at `out`; returns the bytes. The
  // message must leave as written: a queued one is patched at transmit (full header only).
  std::size_t encode_next(const PeerData& p, const Outgoing& m, bool compact, std::byte* out) const;
  // Counts a message that left at once (encode_next's header): its credit, the credits
  // returned with it, its sequence number.
  void count_sent_now(PeerData& p, std::size_t total);
  // A plain eager message, too large to go inline, to a ready peer with a credit and nothing
  // queued: packed into a send-pool slot with its final header and posted at once (what
  // pack_message + enqueue + transmit do, without rewriting the header and without the
  // queue's checks). False when it cannot, with nothing changed.
  bool send_direct(PeerData& p, HandlerId h, std::span<const std::byte> header, std::span<const std::byte> payload,
                   SendCallback& cb);
  // Coalescing at enqueue time: a small plain send to a peer whose send queue waits for
  // credits is written straight into the queue's last tagged message when that one is a small
  // plain send with room (no pool slot and no copy of its own). False when it cannot.
  bool append_queued(PeerData& p, HandlerId h, std::span<const std::byte> header, std::span<const std::byte> payload,
                     SendCallback& cb);
  // Coalescing (docs/wire-protocol.md, MORE): `head`'s tagged message grows by one run of
  // `len` bytes (one message, or several already joined); returns where the run goes, or
  // nullptr when the slot has no room. The caller writes it there.
  static std::byte* grow_batch(Op* head, std::size_t len);
  // `op`, and the sends riding with it, complete with `head`.
  static void chain(Op* head, Op* op);
  // Posts a message. With `open` (a queue draining), a small one joins the batch *open
  // instead (or opens one); the caller posts *open when it is done.
  void transmit(PeerData& p, const Pending& m, Op** open = nullptr);
  // Coalescing: posts the open batch, if any; complete_coalesced completes the sends that
  // rode in `head`'s tagged message (not `head` itself).
  void post_batch(PeerData& p, Op** open);
  void complete_coalesced(Op* head, const absl::Status& status, bool end_replies);
  void post_message(PeerData& p, Op* header);

  EngineCore& engine() const;  // the engine holding this (EngineCore::of)
  std::size_t inflight_ = 0;
};

}  // namespace sluice::detail
