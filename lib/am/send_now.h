// The immediate send path (internal), in a header: send(), call() and reply() each get a copy
// with their constant flags folded in (the compact-or-full header choice, its size), which
// matters on a path of a few hundred instructions per message.
#pragma once

#include <cstring>

#include "am/engine_core.h"
#include "core/copy.h"

namespace sluice::detail {

// Copies n bytes, sizeof(W) <= n <= 2 * sizeof(W): the first and the last sizeof(W), which may
// overlap.
template <typename W>
inline void copy_ends(std::byte* to, const std::byte* from, std::size_t n) {
  W first, last;
  std::memcpy(&first, from, sizeof(W));
  std::memcpy(&last, from + n - sizeof(W), sizeof(W));
  std::memcpy(to, &first, sizeof(W));
  std::memcpy(to + n - sizeof(W), &last, sizeof(W));
}

// Copies n bytes; up to 16 without a call into libc: the user header and payload of a small
// message are a few bytes, and the call costs more than the copy.
inline void copy_bytes(std::byte* to, const std::byte* from, std::size_t n) {
  if (n > 16) copy_payload(to, from, n);
  else if (n >= 8) copy_ends<std::uint64_t>(to, from, n);
  else if (n >= 4) copy_ends<std::uint32_t>(to, from, n);
  else
    for (std::size_t i = 0; i < n; ++i) to[i] = from[i];
}

// Whether a message takes the compact header: its flags and rpc id allow it and it has no aux
// word (a reply buffer's capacity).
constexpr bool takes_compact(const Outgoing& m) { return wire::compactable(m.flags, m.rpc_id) && m.aux == 0; }

[[gnu::always_inline]] inline std::size_t Sender::encode_next(const PeerData& p, const Outgoing& m, bool compact,
                                                              std::byte* out) const {
  std::size_t hs;
  auto credits = static_cast<std::uint16_t>(p.rx.owed().owed());
  auto header_len = static_cast<std::uint16_t>(m.header.size());
  if (compact) [[likely]] {
    hs = wire::encode_compact(m.flags, m.handler, header_len, credits, m.status, p.tx.next_seq_, m.rpc_id, out);
  } else {
    wire::Header wire_header;
    wire_header.flags = m.flags;
    wire_header.handler = m.handler;
    wire_header.user_header_len = header_len;
    wire_header.payload_len = static_cast<std::uint32_t>(m.payload.size());
    wire_header.credits = credits;
    wire_header.status = m.status;
    wire_header.seq = p.tx.next_seq_;
    wire_header.ack = p.rx.window().delivered();
    wire_header.rpc_id = m.rpc_id;
    wire_header.aux = m.aux;
    wire::encode(wire_header, out);
    hs = wire::kHeaderSize;
  }
  copy_bytes(out + hs, m.header.data(), m.header.size());
  copy_bytes(out + hs + m.header.size(), m.payload.data(), m.payload.size());
  return hs + m.header.size() + m.payload.size();
}

[[gnu::always_inline]] inline void Sender::count_sent_now(PeerData& p, std::size_t total) {
  (void)p.tx.credits_.try_consume();
  (void)Delivery::take_owed(p.rx);
  ++p.tx.next_seq_;
  ++p.tx.sent_seq_;
  engine().c_.sent(p.traffic, 1, total);
}

[[gnu::always_inline]] inline bool Sender::send_inline(PeerData& p, const Outgoing& m) {
  // The header form by the flags alone (constants where this is inlined, so the other form's
  // encoding drops out); a call id too wide for the compact one (a foreign caller's: every
  // engine's fits) leaves by the queued path instead.
  bool compact = wire::compactable(m.flags) && m.aux == 0;
  if (compact && !takes_compact(m)) [[unlikely]]
    return false;
  std::size_t hs = compact ? wire::compact_size(m.flags) : wire::kHeaderSize;
  if (hs + m.header.size() + m.payload.size() > kInlineMax || !p.can_send_now()) return false;
  alignas(8) std::byte buf[kInlineMax];
  std::size_t total = encode_next(p, m, compact, buf);
  if (p.ep().send_now(buf, total, p.tx.tag_) != absl::StatusCode::kOk) return false;
  // Sent: now it counts, exactly as transmit() counts a queued message.
  count_sent_now(p, total);
  engine().c_.sent_inline->add();
  return true;
}

[[gnu::always_inline]] inline void Sender::complete_inline(std::uint32_t peer, SendCallback&& cb) {
  if (!cb) return;
  Op* op = engine().ops_.take(OpKind::kSend, peer);
  op->epoch = engine().peers_.at(peer).epoch();
  op->send.on_done = std::move(cb);
  ++inflight_;
  engine().done_.push_back({op, absl::StatusCode::kOk, 0, 0});
}

}  // namespace sluice::detail
