// The send path: packing into send-pool slots, sequencing, credits, the send queue.
#include <cstring>

#include <absl/strings/str_format.h>

#include "am/engine_core.h"
#include "am/send_now.h"
#include "core/copy.h"
#include "core/log.h"

namespace sluice::detail {

Result Sender::pack(PeerData& p, const Outgoing& m, std::uint32_t payload_len, Op** out) {
  std::size_t total = wire::kHeaderSize + m.header.size() + m.payload.size();
  PoolClass& cls = engine().send_pool_->eager();
  if (total > cls.slot_size()) return Result::kInvalidArgument;
  Slot slot;
  // Replies may use the capacity held back for them; everything else leaves it.
  Result got = (m.flags & wire::kFlagReply) ? cls.try_get_reserved(&slot) : cls.try_get(&slot);
  if (got != Result::kOk) [[unlikely]] {
    engine().c_.would_block->add();
    return Result::kWouldBlock;
  }
  wire::Header wire_header;
  wire_header.flags = m.flags;
  wire_header.handler = m.handler;
  wire_header.user_header_len = static_cast<std::uint16_t>(m.header.size());
  wire_header.payload_len = payload_len;
  wire_header.status = m.status;
  wire_header.rpc_id = m.rpc_id;
  wire_header.aux = m.aux;
  std::byte* d = slot_data(slot);
  wire::encode(wire_header, d);
  if (!m.header.empty()) std::memcpy(d + wire::kHeaderSize, m.header.data(), m.header.size());
  if (!m.payload.empty()) copy_payload(d + wire::kHeaderSize + m.header.size(), m.payload.data(), m.payload.size());
  Op* op = engine().ops_.take(OpKind::kSend, p.id());
  op->slot = std::move(slot);
  op->send.message_len = total;
  *out = op;
  return Result::kOk;
}

Result Sender::pack_message(PeerData& p, const Outgoing& m, PayloadCopy copy, Op** header_op, Op** payload_op) {
  auto len = static_cast<std::uint32_t>(m.payload.size());
  *payload_op = nullptr;
  if (m.header.size() + m.payload.size() <= engine().eager_limit_) [[likely]]
    return pack(p, m, len, header_op);
  Outgoing announcement = m;  // the payload follows by rendezvous
  announcement.flags |= wire::kFlagRndv;
  announcement.payload = {};
  Result r = pack(p, announcement, len, header_op);
  if (r != Result::kOk) return r;
  *payload_op = engine().ops_.take(OpKind::kSendPayload, p.id());
  r = prepare_payload(*payload_op, m.payload, copy);
  if (r != Result::kOk) {
    engine().ops_.give(*header_op);
    engine().ops_.give(*payload_op);
  }
  return r;
}

bool Sender::send_direct(PeerData& p, HandlerId h, std::span<const std::byte> header,
                         std::span<const std::byte> payload, SendCallback& cb) {
  if (header.size() + payload.size() > engine().eager_limit_ || !p.can_send_now()) return false;
  Slot slot;
  // No slot: the ordinary path meets the same and reports it (try_take counts no exhaustion
  // here, so it is counted once).
  if (engine().send_pool_->eager().try_take(&slot) != Result::kOk) return false;
  Op* op = engine().ops_.take(OpKind::kSend, p.id());
  Outgoing m = plain_message(h, header, payload);
  op->send.message_len = encode_next(p, m, takes_compact(m), slot_data(slot));
  op->slot = std::move(slot);
  op->epoch = p.epoch();
  op->send.on_done = std::move(cb);
  count_sent_now(p, op->send.message_len);
  post_message(p, op);
  return true;
}

Result Sender::prepare_payload(Op* op, std::span<const std::byte> payload, PayloadCopy copy) {
  op->send.payload_len = payload.size();
  if (copy == PayloadCopy::kNo) {
    op->send.payload = payload.data();
    return Result::kOk;
  }
  if (PoolClass* cls = engine().send_pool_->class_for(payload.size())) {
    Slot slot;
    if (cls->try_get(&slot) == Result::kOk) {
      engine().c_.copied_bytes->add(payload.size());
      copy_payload(slot_data(slot), payload.data(), payload.size());
      op->send.payload = slot_data(slot);
      op->send.payload_memh = slot_memh(slot);
      op->slot = std::move(slot);
      return Result::kOk;
    }
    if (copy == PayloadCopy::kPool) {
      engine().c_.would_block->add();
      return Result::kWouldBlock;
    }
    // A copying reply: the heap rather than a refusal (the RPC window bounds how many exist).
  }
  // Larger than every class: an ordinary heap copy (UCX registers it through its cache).
  engine().c_.copied_bytes->add(payload.size());
  op->heap.reset(new std::byte[payload.size()]);
  copy_payload(op->heap.get(), payload.data(), payload.size());
  op->send.payload = op->heap.get();
  return Result::kOk;
}

// Inlined into Peer::send and EngineCore::send, its callers: the inline send, and nothing
// else that needs registers kept across it (send_queued() is the rest, out of line).
[[gnu::always_inline]] inline Result Sender::send(PeerData& p, HandlerId h, std::span<const std::byte> header,
                                                  std::span<const std::byte> payload, SendCallback&& cb,
                                                  PayloadCopy copy, void* memh) {
  if (p.state() == PeerState::kDead) [[unlikely]]
    return Result::kUnavailable;
  bool plain = header.size() <= kMaxUserHeader && payload.size() <= engine().config_.max_message &&
               p.tx.queued_ < engine().config_.send_queue_max && p.tx.queue_.empty();
  if (plain && send_inline(p, plain_message(h, header, payload))) [[likely]] {
    complete_inline(p.id(), std::move(cb));
    return Result::kOk;
  }
  return send_queued(p, h, header, payload, std::move(cb), copy, memh, plain);
}

Result Sender::send_queued(PeerData& p, HandlerId h, std::span<const std::byte> header,
                           std::span<const std::byte> payload, SendCallback&& cb, PayloadCopy copy, void* memh,
                           bool tried_inline) {
  if (header.size() > kMaxUserHeader || payload.size() > engine().config_.max_message) [[unlikely]]
    return engine().guard_.invalid(
        absl::StrFormat("send(handler %d) to %s: header of %u bytes (at most %u) or payload of %u (at most %u, "
                        "SLUICE_MAX_MESSAGE)",
                        h, p.name(), header.size(), kMaxUserHeader, payload.size(), engine().config_.max_message));
  if (p.tx.queued_ >= engine().config_.send_queue_max) [[unlikely]] {
    engine().c_.would_block->add();
    return Result::kWouldBlock;
  }
  Outgoing m = plain_message(h, header, payload);
  if (p.tx.queue_.empty()) [[likely]] {
    if (!tried_inline && send_inline(p, m)) {
      complete_inline(p.id(), std::move(cb));
      return Result::kOk;
    }
    if (send_direct(p, h, header, payload, cb)) return Result::kOk;
  } else if (append_queued(p, h, header, payload, cb)) {
    return Result::kOk;
  }
  if (!engine().config_.rndv && header.size() + payload.size() > engine().eager_limit_)
    return send_fragmented(p, m, std::move(cb));
  Op *header_op, *payload_op;
  Result r = pack_message(p, m, copy, &header_op, &payload_op);
  if (r != Result::kOk) return r;
  if (payload_op != nullptr && memh != nullptr) payload_op->send.payload_memh = memh;  // a registered pool slot
  header_op->send.batchable = payload_op == nullptr && header_op->send.message_len <= kCoalesceMax;
  (payload_op ? payload_op : header_op)->send.on_done = std::move(cb);  // the last operation completes the send
  return enqueue(p, header_op, payload_op);
}

Result EngineCore::send(PeerData& p, HandlerId h, std::span<const std::byte> header, std::span<const std::byte> payload,
                        SendCallback&& cb, PayloadCopy copy, void* memh) {
  return sender_.send(p, h, header, payload, std::move(cb), copy, memh);
}

}  // namespace sluice::detail

namespace sluice {

// The public send with the send path inlined: one call from the application into the engine.
Result Peer::send(HandlerId h, std::span<const std::byte> header, std::span<const std::byte> payload,
                  SendCallback&& on_done) {
  if (!engine_->guard().engine_thread("Peer::send")) [[unlikely]]
    return Result::kInvalidArgument;
  return engine_->sender().send(*data_, h, header, payload, std::move(on_done), detail::PayloadCopy::kNo);
}

}  // namespace sluice

namespace sluice::detail {

Result Sender::send_fragmented(PeerData& p, const Outgoing& m, SendCallback&& cb, bool ends_reply) {
  // The bounce-buffer baseline (SLUICE_RNDV=n): the payload is copied piece by piece through
  // send-pool slots and reassembled in the receiver. Pieces are packed as slots allow; when the
  // pool is empty this progresses the engine until earlier pieces have gone.
  std::span<const std::byte> header = m.header, payload = m.payload;
  std::size_t offset = 0;
  bool first = true;
  while (offset < payload.size()) {
    std::span<const std::byte> uh = first ? header : std::span<const std::byte>();
    std::size_t room = engine().eager_limit_ - uh.size();
    std::size_t piece = std::min(room, payload.size() - offset);
    Op* op = nullptr;
    Result r;
    auto deadline = Clock::now() + (engine().config_.connect_timeout == kInfinite ? std::chrono::hours(24)
                                                                                  : engine().config_.connect_timeout);
    Outgoing piece_m = m;  // a piece's aux is its offset
    piece_m.flags |= wire::kFlagFrag;
    piece_m.header = uh;
    piece_m.payload = payload.subspan(offset, piece);
    piece_m.aux = offset;
    piece_m.status = 0;
    while ((r = pack(p, piece_m, static_cast<std::uint32_t>(payload.size()), &op)) == Result::kWouldBlock) {
      if (p.state() == PeerState::kDead) return first ? Result::kUnavailable : Result::kOk;
      if (Clock::now() >= deadline) return first ? Result::kWouldBlock : Result::kOk;
      engine().progress();
    }
    if (r != Result::kOk) return r;
    engine().c_.bounce_bytes->add(piece);
    engine().c_.copied_bytes->add(piece);
    offset += piece;
    if (offset == payload.size()) {
      op->send.on_done = std::move(cb);  // NOLINT(bugprone-use-after-move): the last piece, once
      op->send.ends_reply = ends_reply;
    }
    if (first && p.state() == PeerState::kDead) {
      engine().ops_.give(op);
      return Result::kUnavailable;
    }
    first = false;
    (void)enqueue(p, op, nullptr);
  }
  return Result::kOk;
}

Result Sender::enqueue(PeerData& p, Op* header, Op* payload) {
  std::uint64_t seq = p.tx.next_seq_++;
  wire::patch_seq(slot_data(header->slot), seq);
  std::uint32_t me = p.remote_index();
  header->epoch = p.epoch();
  if (payload != nullptr) {
    if (payload->send.tag == 0) payload->send.tag = wire::make_tag(wire::kRndv, me, seq);
    payload->epoch = p.epoch();
  }
  if (p.state() == PeerState::kNew) engine().link_.start_handshake(p);
  if (p.state() == PeerState::kReady && p.tx.queue_.empty() && p.tx.credits_.try_consume()) [[likely]] {
    transmit(p, {header, payload});
    return Result::kOk;
  }
  if (p.state() == PeerState::kDead) {
    engine().ops_.give(header);
    if (payload) engine().ops_.give(payload);
    return Result::kUnavailable;
  }
  p.tx.queue_.push_back({header, payload});
  engine().c_.queue_hwm->update(++p.tx.queued_);
  if (p.state() == PeerState::kReady) {
    engine().c_.credit_stall(p.traffic);
    ask(p);
  }
  engine().link_.watch(p.link, p.id());  // its starved-sends watch ticks
  return Result::kOk;
}

void Sender::transmit(PeerData& p, const Pending& m, Op** open) {
  Op* h = m.header;
  p.tx.sent_seq_ += h->send.batch_count;  // messages reach the transport in sequence order (FIFO queue)
  wire::patch_piggyback(slot_data(h->slot), Delivery::take_owed(p.rx), p.rx.window().delivered());
  engine().c_.sent(p.traffic, h->send.batch_count, h->send.message_len + (m.payload ? m.payload->send.payload_len : 0));
  if (open != nullptr && m.payload == nullptr && h->send.batch_count == 1 && h->send.message_len <= kCoalesceMax &&
      (wire::flags_of(slot_data(h->slot)) & wire::kFlagFrag) == 0) {
    // Coalescing: join the open batch when it has room, otherwise open one. (A queue entry
    // that carries several already goes as it is: joining would copy them all again.)
    if (Op* head = *open) {
      if (std::byte* at = grow_batch(head, h->send.message_len)) {
        copy_payload(at, slot_data(h->slot), h->send.message_len);
        h->slot.release();
        chain(head, h);
        engine().c_.coalesced->add();
        return;
      }
      post_batch(p, open);
    }
    *open = h;
    return;
  }
  if (open != nullptr) post_batch(p, open);  // what was batched goes first
  if (m.payload != nullptr) engine().fault_.pass(FaultPoint::kRndvAnnounce);
  post_message(p, h);
  if (m.payload != nullptr) {
    // The payload stays at the sender until the receiver posts the matching exact receive.
    engine().c_.rndv_sent->add();
    ++inflight_;
    PostResult r = p.ep().post_send(m.payload, m.payload->send.payload, m.payload->send.payload_len,
                                    m.payload->send.tag, m.payload->send.payload_memh);
    if (r.kind != Post::kPending)
      engine().done_.push_back({m.payload, r.kind == Post::kDone ? absl::StatusCode::kOk : r.code, 0, 0});
    engine().fault_.pass(FaultPoint::kRndvPayload);
  }
}

std::byte* Sender::grow_batch(Op* head, std::size_t len) {
  std::size_t off = (head->send.message_len + 7) / 8 * 8;
  if (off + len > slot_size(head->slot)) return nullptr;
  std::byte* b = slot_data(head->slot);
  wire::set_flags(b + head->send.batch_last, wire::flags_of(b + head->send.batch_last) | wire::kFlagMore);
  // Zero the padding (under 8 bytes) with one 8-byte store: what it writes past `off` the
  // message written there next overwrites, and it stays inside the slot (len >= a header).
  static_assert(wire::kHeaderSize >= 8);
  constexpr std::uint64_t kZero = 0;
  std::memcpy(b + head->send.message_len, &kZero, sizeof(kZero));
  head->send.message_len = off + len;
  head->send.batch_last = off;
  return b + off;
}

void Sender::chain(Op* head, Op* op) {
  Op* tail = head->send.coalesced_tail != nullptr ? head->send.coalesced_tail : head;
  tail->send.coalesced_next = op;
  head->send.coalesced_tail = op->send.coalesced_tail != nullptr ? op->send.coalesced_tail : op;
  op->send.coalesced_tail = nullptr;
}

bool Sender::append_queued(PeerData& p, HandlerId h, std::span<const std::byte> header,
                           std::span<const std::byte> payload, SendCallback& cb) {
  if (p.tx.queue_.empty() || !engine().config_.coalesce) return false;
  const Pending& last = p.tx.queue_.back();
  Op* head = last.header;
  std::size_t len = wire::kHeaderSize + header.size() + payload.size();
  // At most half the grant rides in one tagged message, so a batch goes as soon as half the
  // credits are back (and always can: it never needs more than the peer granted).
  if (last.payload != nullptr || !head->send.batchable || len > kCoalesceMax ||
      head->send.batch_count >= std::max<std::uint32_t>(1, p.tx.credits_.granted() / 2)) {
    return false;
  }
  std::byte* at = grow_batch(head, len);
  if (at == nullptr) return false;
  wire::Header wire_header;
  wire_header.handler = h;
  wire_header.user_header_len = static_cast<std::uint16_t>(header.size());
  wire_header.payload_len = static_cast<std::uint32_t>(payload.size());
  wire_header.seq = p.tx.next_seq_++;
  wire::encode(wire_header, at);
  if (!header.empty()) std::memcpy(at + wire::kHeaderSize, header.data(), header.size());
  if (!payload.empty()) copy_payload(at + wire::kHeaderSize + header.size(), payload.data(), payload.size());
  ++head->send.batch_count;
  engine().c_.queue_hwm->update(++p.tx.queued_);
  if (cb) {
    Op* op = engine().ops_.take(OpKind::kSend, p.id());
    op->epoch = p.epoch();
    op->send.on_done = std::move(cb);
    chain(head, op);
  }
  engine().c_.coalesced->add();
  if (p.state() == PeerState::kReady) {
    engine().c_.credit_stall(p.traffic);
    ask(p);
  }
  return true;
}

void Sender::post_message(PeerData& p, Op* header) {
  ++inflight_;
  // The EAGER tag is the peer's (learnt from its HELLO, which may come after the enqueue).
  PostResult r =
      p.ep().post_send(header, slot_data(header->slot), header->send.message_len, p.tx.tag_, slot_memh(header->slot));
  if (r.kind != Post::kPending)
    engine().done_.push_back({header, r.kind == Post::kDone ? absl::StatusCode::kOk : r.code, 0, 0});
}

void Sender::post_batch(PeerData& p, Op** open) {
  if (*open == nullptr) return;
  post_message(p, *open);
  *open = nullptr;
}

void Sender::complete_coalesced(Op* head, const absl::Status& status, bool end_replies) {
  Op* op = head->send.coalesced_next;
  head->send.coalesced_next = nullptr;
  while (op != nullptr) {
    Op* next = op->send.coalesced_next;
    op->send.coalesced_next = nullptr;
    if (op->send.on_done) op->send.on_done(status);
    if (op->send.ends_reply && end_replies) engine().rpc_server_.reply_sent(engine().peers_.at(op->peer));
    engine().ops_.give(op);
    op = next;
  }
}

bool Sender::send_packed_now(PeerData& p, Op* header) {
  // A call that waited for a slot, packed already: it leaves inline when it may, so a window
  // beyond the server's window costs no transport request and completion per call.
  if (header->send.message_len > kInlineMax || header->send.batch_count != 1 || !p.can_send_now()) return false;
  std::byte* bytes = slot_data(header->slot);
  wire::patch_seq(bytes, p.tx.next_seq_);
  wire::patch_piggyback(bytes, static_cast<std::uint16_t>(p.rx.owed().owed()), p.rx.window().delivered());
  if (p.ep().send_now(bytes, header->send.message_len, p.tx.tag_) != absl::StatusCode::kOk) return false;
  count_sent_now(p, header->send.message_len);
  engine().c_.sent_inline->add();
  engine().ops_.give(header);
  return true;
}

void Sender::flush(PeerData& p) {
  if (p.state() != PeerState::kReady) return;
  engine().rpc_client_.start_waiting(p);
  Op* open = nullptr;
  Op** coalesce = engine().config_.coalesce ? &open : nullptr;
  while (!p.tx.queue_.empty() && p.tx.credits_.try_consume(p.tx.queue_.front().header->send.batch_count)) {
    Pending m = p.tx.queue_.front();
    p.tx.queue_.pop_front();
    p.tx.queued_ -= m.header->send.batch_count;
    transmit(p, m, coalesce);
  }
  post_batch(p, &open);
  if (!p.tx.queue_.empty()) {  // waits for the peer to return credits, or to lend more
    engine().c_.credit_stall(p.traffic);
    ask(p);
  }
}

void Sender::on_send_done(Op* op, absl::StatusCode code) {
  if (op->orphaned) [[unlikely]] {  // completed already when its peer died
    engine().ops_.give(op);
    return;
  }
  --inflight_;
  PeerData& p = engine().peers_.at(op->peer);
  bool stale = op->epoch != p.epoch();
  bool declined = !op->send.declined.empty() && !stale;  // refused by the receiver (DECLINE); the peer goes on
  if (code != absl::StatusCode::kOk && !declined && !stale && p.state() != PeerState::kDead) {
    engine().connections_.transfer_failed(p, absl::StrFormat("send failed: %s", absl::StatusCodeToString(code)));
  }
  absl::Status status =
      code == absl::StatusCode::kOk
          ? absl::OkStatus()
          : absl::UnavailableError(absl::StrFormat(
                "%s: %s", p.name(), p.link.fail_reason().empty() ? "send failed" : p.link.fail_reason()));
  if (declined) [[unlikely]]
    status = absl::ResourceExhaustedError(absl::StrFormat("%s refused the message: %s", p.name(), op->send.declined));
  if (op->send.on_done) op->send.on_done(status);
  if (op->send.ends_reply && !stale) engine().rpc_server_.reply_sent(p);
  complete_coalesced(op, status, !stale);  // the messages that rode with it, in order
  engine().ops_.give(op);
}

}  // namespace sluice::detail
