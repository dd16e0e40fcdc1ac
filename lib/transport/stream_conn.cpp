// The stream transport's connection: its lifecycle, reading and matching; its writing half is
// stream_writer.cpp. stream.h describes the protocol and its bounds.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <absl/strings/str_format.h>

#include "core/log.h"
#include "core/net.h"
#include "transport/stream.h"

namespace sluice::detail {

namespace {
constexpr std::size_t kAheadSize = std::size_t{64} * 1024;
// What a held message counts against the unexpected bound at least: its record and the heap
// block beside it, so that a flood of empty messages or announcements is bounded too.
constexpr std::size_t kHeldMin = 256;

bool matches(Tag have, Tag want, Tag mask) { return ((have ^ want) & mask) == 0; }
// What a held message counts against the unexpected bound: its bytes, or an announcement's cost.
std::size_t held_cost(const StreamMsg& m) { return m.transfer != 0 ? kHeldMin : std::max(m.length, kHeldMin); }
// One direction's cipher: none when the connection is plain.
stream::Cipher cipher(const StreamOptions& o, const stream::SessionKey& key) {
  return o.suite != 0 ? stream::Cipher(static_cast<stream::Suite>(o.suite), key) : stream::Cipher();
}
}  // namespace

StreamConn::StreamConn(StreamHub* hub, StreamOptions options, Endpoint::ErrorCallback on_error, void* arg)
    : hub_(hub),
      options_(std::move(options)),
      on_error_(on_error),
      arg_(arg),
      rx_cipher_(cipher(options_, options_.rx_key)),
      writer_(this, hub, cipher(options_, options_.tx_key), options_.eager_max) {
  ahead_.reset(new std::byte[kAheadSize]);
}

StreamConn::~StreamConn() {
  if (fd_ >= 0) ::close(fd_);
}

void StreamConn::attach(int fd) {
  fd_ = fd;
  hub_->watch(this, EPOLLIN | EPOLLRDHUP, true);
  if (failed_ || closed_) return;
  flush();
}

void StreamConn::fail(const std::string& why) {
  if (failed_ || closed_) return;
  failed_ = true;
  failure_ = why;
  if (fd_ >= 0) hub_->watch(this, 0, false);
  if (on_error_ != nullptr) on_error_(arg_, -25 /* UCS_ERR_CONNECTION_RESET */);
}

void StreamConn::want_out(bool on) {
  if (on == out_armed_ || fd_ < 0) return;
  out_armed_ = on;
  hub_->watch(this, EPOLLIN | EPOLLRDHUP | (on ? EPOLLOUT : 0u), false);
}

void StreamConn::on_writable() {
  if (!failed_ && !closed_) flush();
}

void StreamConn::flush() {
  if (fd_ < 0 || failed_ || closed_) return;  // not attached yet (attach() flushes), or gone
  bool done = writer_.write();
  if (!failed_ && !closed_) want_out(!done);
}

void StreamConn::complete_recv(const StreamRecv& r, absl::StatusCode code, std::size_t length, Tag tag) {
  r.op->request = r.op->stream = nullptr;
  r.op->on_complete(r.op, code, length, tag);
}

// ---- posting receives ------------------------------------------------------------------

bool StreamConn::take_posted(Tag tag, StreamRecv* out) {
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    if (!matches(tag, it->tag, it->mask)) continue;
    *out = *it;
    posted_.erase(it);
    return true;
  }
  return false;
}

PostResult StreamConn::post_recv(TransportOp* op, void* buf, std::size_t len, Tag tag, Tag mask) {
  StreamRecv r{op, static_cast<std::byte*>(buf), len, tag, mask};
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    if (!matches((*it)->tag, tag, mask)) continue;
    std::unique_ptr<StreamMsg> m = std::move(*it);
    unexpected_.erase(it);
    unexpected_bytes_ -= held_cost(*m);
    m->conn = nullptr;
    return recv_message(op, m.release(), buf, len);
  }
  op->request = op;  // pending (the engine looks at it); a stream op's request is not UCX's
  op->stream = this;
  posted_.push_back(r);
  return {Post::kPending};
}

PostResult StreamConn::recv_message(TransportOp* op, StreamMsg* msg, void* buf, std::size_t len) {
  std::unique_ptr<StreamMsg> m(msg);
  StreamRecv r{op, static_cast<std::byte*>(buf), len, m->tag, kFullMask};
  if (m->transfer != 0) {
    op->request = op;
    op->stream = this;
    clear_to_send(r, m->transfer, m->length, m->tag);
    return {Post::kPending};
  }
  // As UCX does for a message that already arrived: the callback runs inside the call.
  if (m->length > len) {
    complete_recv(r, absl::StatusCode::kOutOfRange, 0, m->tag);
  } else {
    if (m->length != 0) std::memcpy(buf, m->bytes.get(), m->length);
    complete_recv(r, absl::StatusCode::kOk, m->length, m->tag);
  }
  return {Post::kPending};
}

void StreamConn::clear_to_send(StreamRecv r, std::uint64_t transfer, std::size_t length, Tag tag) {
  r.tag = tag;
  r.announced = length;  // checked against the DATA frame
  if (failed_ || closed_) {
    complete_recv(r, absl::StatusCode::kCancelled, 0, tag);
    return;
  }
  awaiting_.emplace(transfer, r);
  writer_.queue_ctrl(stream::Kind::kCts, 0, 0, transfer);
}

StreamMsg* StreamConn::take_unexpected(Tag tag, Tag mask) {
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    if (!matches((*it)->tag, tag, mask)) continue;
    StreamMsg* m = it->release();
    unexpected_.erase(it);
    unexpected_bytes_ -= held_cost(*m);
    m->conn = this;
    return m;
  }
  return nullptr;
}

bool StreamConn::has_unexpected(Tag tag, Tag mask) const {
  for (const auto& m : unexpected_)
    if (matches(m->tag, tag, mask)) return true;
  return false;
}

void StreamConn::cancel(TransportOp* op) {
  if (writer_.cancel(op)) return;
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    if (it->op != op) continue;
    StreamRecv r = *it;
    posted_.erase(it);
    complete_recv(r, absl::StatusCode::kCancelled, 0, 0);
    return;
  }
  // A receive whose CTS went out stays until its DATA has landed (the bytes are on their way
  // into its buffer): a cancel is a no-op then, as UCX's is for a receive being filled.
}

void StreamConn::close() {
  if (closed_) return;
  // What already left as far as its senders know (held or sealed bytes: a BYE answered in the
  // pass that closes) goes out first, as far as the socket takes it now.
  flush();
  closed_ = true;
  if (fd_ >= 0) {
    hub_->watch(this, 0, false);
    ::close(fd_);
    fd_ = -1;
  }
  while (!posted_.empty()) {
    StreamRecv r = posted_.front();
    posted_.pop_front();
    complete_recv(r, absl::StatusCode::kCancelled, 0, 0);
  }
  for (auto& [id, r] : awaiting_) complete_recv(r, absl::StatusCode::kCancelled, 0, 0);
  awaiting_.clear();
  // A receive whose body was arriving (or being dropped as too large for it) ends too.
  if (in_body_ && body_recv_.op != nullptr) complete_recv(body_recv_, absl::StatusCode::kCancelled, 0, 0);
  body_recv_.op = nullptr;
  in_body_ = false;
  unexpected_.clear();
  unexpected_bytes_ = 0;
  writer_.cancel_all();
}

// ---- reading -----------------------------------------------------------------------------

std::size_t StreamConn::take(std::byte* dst, std::size_t n, bool ahead) {
  std::size_t got = 0;
  if (ahead_end_ > ahead_begin_) {
    got = std::min(n, ahead_end_ - ahead_begin_);
    std::memcpy(dst, ahead_.get() + ahead_begin_, got);
    ahead_begin_ += got;
    if (got == n) return got;
  }
  ahead_begin_ = ahead_end_ = 0;
  if (drained_) {  // the last read took less than it asked: the socket is empty (epoll says when not)
    would_block_ = true;
    return got;
  }
  // Read ahead only while no DATA frame can come: its payload goes straight to its buffer.
  bool refill = ahead && awaiting_.empty();
  std::size_t want = refill ? kAheadSize : n - got;
  ssize_t r = refill ? ::recv(fd_, ahead_.get(), want, 0) : ::recv(fd_, dst + got, want, 0);
  if (r > 0) {
    drained_ = static_cast<std::size_t>(r) < want;
    if (!refill) return got + static_cast<std::size_t>(r);
    ahead_end_ = static_cast<std::size_t>(r);
    std::size_t more = std::min(n - got, ahead_end_);
    std::memcpy(dst + got, ahead_.get(), more);
    ahead_begin_ = more;
    return got + more;
  }
  if (r == 0) {
    closed_by_peer_ = hdr_have_ == 0 && !in_body_ && got == 0;
    fail(closed_by_peer_ ? "its connection to us closed" : "its connection closed in the middle of a frame");
  } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
    would_block_ = true;
  } else {
    fail(connection_ended(errno));
  }
  return got;
}

void StreamConn::on_readable() {
  if (failed_ || closed_ || fd_ < 0) return;
  would_block_ = drained_ = false;
  // A bounded number of steps (a header, or a body piece each) before other connections get
  // their turn.
  for (int steps = 0; steps < 512 && !failed_ && !closed_ && !would_block_; ++steps) {
    if (!(in_body_ ? read_body() : read_header())) break;
  }
}

bool StreamConn::read_header() {
  const bool sealed = rx_cipher_.on();
  const std::size_t want = stream::kHeaderSize + (sealed ? stream::kMacSize : 0);
  hdr_have_ += take(hdr_ + hdr_have_, want - hdr_have_, true);
  if (hdr_have_ < want) return false;
  hdr_have_ = 0;
  if (sealed && !rx_cipher_.open(hdr_, stream::kHeaderSize, hdr_ + stream::kHeaderSize)) {
    fail("a frame header failed authentication (altered, replayed or out of order)");
    return false;
  }
  stream::Header h;
  if (!stream::decode(hdr_, &h)) {
    fail("sent a malformed frame header");
    return false;
  }
  return handle_header(h);
}

bool StreamConn::handle_header(const stream::Header& h) {
  cur_ = h;
  if ((h.kind == stream::Kind::kEager || h.kind == stream::Kind::kRts) &&
      (h.tag & options_.tag_mask) != options_.tag_value) [[unlikely]] {
    // The peer tagged a message as another peer's (its slot in our tags): it could otherwise
    // pass for that peer in the protocol above.
    fail(absl::StrFormat("sent a message tagged %#x, which is not its own", h.tag));
    return false;
  }
  switch (h.kind) {
    case stream::Kind::kEager: return on_eager(h);
    case stream::Kind::kRts: return on_rts(h);
    case stream::Kind::kCts:
      if (!writer_.cleared(h.id)) {
        fail(absl::StrFormat("cleared transfer %u, which we never announced", h.id));
        return false;
      }
      return true;
    case stream::Kind::kData: {
      auto it = awaiting_.find(h.id);
      if (it == awaiting_.end() || it->second.announced != h.length) {
        fail(absl::StrFormat("sent %u bytes for transfer %u, which %s", h.length, h.id,
                             it == awaiting_.end() ? "we never cleared" : "announced another length"));
        return false;
      }
      body_recv_ = it->second;
      awaiting_.erase(it);
      begin_body(h.length > body_recv_.len ? Sink::kDiscard : Sink::kRecv, body_recv_.buf, h.length);
      return true;
    }
  }
  return false;
}

bool StreamConn::on_eager(const stream::Header& h) {
  if (h.length > options_.frame_max) {
    fail(absl::StrFormat("sent a %u-byte eager frame, above the bound of %u", h.length, options_.frame_max));
    return false;
  }
  if (take_posted(h.tag, &body_recv_)) {
    begin_body(h.length > body_recv_.len ? Sink::kDiscard : Sink::kRecv, body_recv_.buf, h.length);
    return true;
  }
  if (unexpected_bytes_ + std::max<std::size_t>(h.length, kHeldMin) > options_.unexpected_max) {
    fail(absl::StrFormat("sent more than its credits allow: %u bytes would wait for receives, the bound is %u",
                         unexpected_bytes_ + std::max<std::size_t>(h.length, kHeldMin), options_.unexpected_max));
    return false;
  }
  body_recv_.op = nullptr;
  body_msg_ = std::make_unique<StreamMsg>();
  body_msg_->tag = h.tag;
  body_msg_->length = h.length;
  body_msg_->bytes.reset(new std::byte[std::max<std::size_t>(h.length, 1)]);
  begin_body(Sink::kUnexpected, body_msg_->bytes.get(), h.length);
  return true;
}

bool StreamConn::on_rts(const stream::Header& h) {
  bool again = awaiting_.count(h.id) != 0 ||
               std::any_of(unexpected_.begin(), unexpected_.end(), [&](const auto& m) { return m->transfer == h.id; });
  if (again) {
    fail(absl::StrFormat("announced transfer %u twice", h.id));
    return false;
  }
  if (StreamRecv taken; take_posted(h.tag, &taken)) {
    clear_to_send(taken, h.id, h.length, h.tag);
    return true;
  }
  if (unexpected_bytes_ + kHeldMin > options_.unexpected_max) {
    fail(absl::StrFormat("announced more transfers than its credits allow (bound %u bytes)", options_.unexpected_max));
    return false;
  }
  auto m = std::make_unique<StreamMsg>();
  m->tag = h.tag;
  m->length = h.length;
  m->transfer = h.id;
  add_unexpected(std::move(m));
  return true;
}

void StreamConn::add_unexpected(std::unique_ptr<StreamMsg> m) {
  unexpected_bytes_ += held_cost(*m);
  unexpected_.push_back(std::move(m));
}

void StreamConn::begin_body(Sink sink, std::byte* dst, std::size_t len) {
  sink_ = sink;
  body_len_ = len;
  body_done_ = piece_have_ = mac_have_ = 0;
  if (sink == Sink::kDiscard) {
    if (!scratch_) scratch_.reset(new std::byte[stream::kSealChunk]);
    dst = scratch_.get();
  }
  body_dst_ = dst;
  in_body_ = true;
  if (len == 0) finish_body();
}

bool StreamConn::read_body() {
  const bool sealed = rx_cipher_.on();
  const bool discard = sink_ == Sink::kDiscard;
  // A piece: sealed, up to kSealChunk bytes and its tag; plain, the rest of the body (a
  // discarded one through the scratch buffer, kSealChunk bytes at a time).
  std::size_t piece = body_len_ - body_done_;
  if (sealed || discard) piece = std::min(piece, stream::kSealChunk);
  std::byte* at = discard ? body_dst_ : body_dst_ + body_done_;
  // Read-ahead serves eager bodies only: a DATA payload is read from the socket itself.
  const bool ahead = cur_.kind == stream::Kind::kEager;
  while (piece_have_ < piece) {
    std::size_t n = take(at + piece_have_, piece - piece_have_, ahead);
    if (n == 0) return false;
    piece_have_ += n;
  }
  if (sealed) {
    while (mac_have_ < stream::kMacSize) {
      std::size_t n = take(mac_ + mac_have_, stream::kMacSize - mac_have_, ahead);
      if (n == 0) return false;
      mac_have_ += n;
    }
    if (!rx_cipher_.open(at, piece, mac_)) {
      fail("a frame body failed authentication (altered, replayed or out of order)");
      return false;
    }
  }
  body_done_ += piece;
  piece_have_ = mac_have_ = 0;
  if (body_done_ == body_len_) finish_body();
  return true;
}

void StreamConn::finish_body() {
  in_body_ = false;
  StreamRecv r = body_recv_;
  body_recv_.op = nullptr;
  switch (sink_) {
    case Sink::kRecv: {
      Tag tag = cur_.kind == stream::Kind::kEager ? cur_.tag : r.tag;
      complete_recv(r, absl::StatusCode::kOk, body_len_, tag);
      break;
    }
    case Sink::kUnexpected: add_unexpected(std::move(body_msg_)); break;
    case Sink::kDiscard:  // a body too large for the receive it matched
      complete_recv(r, absl::StatusCode::kOutOfRange, 0, cur_.kind == stream::Kind::kEager ? cur_.tag : r.tag);
      break;
  }
}

}  // namespace sluice::detail
