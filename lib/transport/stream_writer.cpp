// The stream transport's writing half (stream_writer.h): eager frames at once from the caller's
// buffer (writev), larger ones announced (RTS) and written when cleared (CTS), everything in
// order. Sealed, frames are encrypted into the seal buffer piece by piece as the socket takes them.
#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include <absl/strings/str_format.h>

#include "core/net.h"
#include "transport/stream.h"

namespace sluice::detail {

namespace {
// Sealed bytes buffered for the socket at most (frames are sealed as it takes them).
constexpr std::size_t kSealedCap = std::size_t{256} * 1024;
constexpr int kMaxIov = 64;

ssize_t send_iov(int fd, iovec* iov, int n) {
  msghdr m{};
  m.msg_iov = iov;
  m.msg_iovlen = static_cast<std::size_t>(n);
  return ::sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
}

bool would_block(ssize_t n) { return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR); }
}  // namespace

// A frame to write: its header, and the payload that follows it (the caller's bytes, kept valid
// until the op completes, or `owned`).
struct StreamWriter::Send {
  TransportOp* op = nullptr;  // nullptr: nothing to complete (a control frame, a send_now's rest)
  std::byte header[stream::kHeaderSize];
  const std::byte* payload = nullptr;
  std::size_t payload_len = 0;
  std::unique_ptr<std::byte[]> owned;
};

StreamWriter::StreamWriter(StreamConn* conn, StreamHub* hub, stream::Cipher cipher, std::size_t eager_max)
    : conn_(conn), hub_(hub), eager_max_(eager_max), cipher_(std::move(cipher)) {}

StreamWriter::~StreamWriter() {
  for (Send* s : tx_) delete s;
  for (auto& [id, s] : rts_sent_) delete s;
}

bool StreamWriter::write() { return cipher_.on() ? flush_sealed() : flush_plain(); }

bool StreamWriter::cleared(std::uint64_t id) {
  auto it = rts_sent_.find(id);
  if (it == rts_sent_.end()) return false;
  Send* s = it->second;
  rts_sent_.erase(it);
  queue(s);
  return true;
}

void StreamWriter::cancel_all() {
  std::deque<Send*> tx;
  tx.swap(tx_);
  for (auto& [id, s] : rts_sent_) tx.push_back(s);
  rts_sent_.clear();
  for (Send* s : tx) {
    TransportOp* op = s->op;
    delete s;
    if (op != nullptr) op->request = op->stream = nullptr;
    if (op != nullptr) op->on_complete(op, absl::StatusCode::kCancelled, 0, 0);
  }
}

PostResult StreamWriter::post_send(TransportOp* op, const void* buf, std::size_t len, Tag tag) {
  if (!conn_->usable()) [[unlikely]]
    return {Post::kError, absl::StatusCode::kUnavailable};
  const auto* payload = static_cast<const std::byte*>(buf);
  if (len > eager_max_) {
    // Rendezvous: the payload waits here until the receiver has posted its buffer.
    std::uint64_t id = next_transfer_++;
    Send* s = new_send(op, payload, len);
    stream::encode({stream::Kind::kData, static_cast<std::uint32_t>(len), 0, id}, s->header);
    rts_sent_.emplace(id, s);
    queue_ctrl(stream::Kind::kRts, static_cast<std::uint32_t>(len), tag, id);
    return {Post::kPending};
  }
  std::byte header[stream::kHeaderSize];
  stream::encode({stream::Kind::kEager, static_cast<std::uint32_t>(len), tag, 0}, header);
  if (cipher_.on() && tx_.empty()) {
    // Sealed into the seal buffer now: a copy, so the caller's buffer is free at once.
    seal_frame(header, payload, len);
    if (hub_->holding()) hub_->dirty(conn_);
    else conn_->flush();
    return conn_->failed() ? PostResult{Post::kError, absl::StatusCode::kUnavailable} : PostResult{Post::kDone};
  }
  if (hold_frame(header, payload, len)) return {Post::kDone};
  ssize_t n = 0;
  if (tx_.empty() && out_off_ == out_.size() && conn_->fd() >= 0) {
    // Nothing ahead of it: straight from the caller's buffer.
    iovec iov[2] = {{header, stream::kHeaderSize}, {const_cast<std::byte*>(payload), len}};
    n = send_iov(conn_->fd(), iov, len != 0 ? 2 : 1);
    if (n == static_cast<ssize_t>(stream::kHeaderSize + len)) [[likely]]
      return {Post::kDone};
    if (n < 0 && !would_block(n)) {
      conn_->fail(connection_ended(errno));
      return {Post::kError, absl::StatusCode::kUnavailable};
    }
  }
  // Behind others, or the socket is full: it waits, the caller's buffer with it.
  Send* s = new_send(op, payload, len);
  std::memcpy(s->header, header, sizeof(header));
  if (n > 0) {  // the head of an empty queue, partly written
    tx_.push_back(s);
    tx_head_done_ = static_cast<std::size_t>(n);
    conn_->want_out(true);
  } else {
    queue(s);
  }
  return {Post::kPending};
}

StreamWriter::Send* StreamWriter::new_send(TransportOp* op, const std::byte* payload, std::size_t len) {
  auto* s = new Send;
  s->op = op;
  s->payload = payload;
  s->payload_len = len;
  op->request = s;  // pending (the engine looks at it), and where Worker::cancel finds it
  op->stream = conn_;
  return s;
}

PostResult StreamWriter::send_now(const void* buf, std::size_t len, Tag tag) {
  if (!conn_->usable()) [[unlikely]]
    return {Post::kError, absl::StatusCode::kUnavailable};
  if (!tx_.empty() || conn_->fd() < 0 || len > eager_max_ || sealed_off_ != sealed_len_)
    return {Post::kError, absl::StatusCode::kResourceExhausted};
  std::byte header[stream::kHeaderSize];
  stream::encode({stream::Kind::kEager, static_cast<std::uint32_t>(len), tag, 0}, header);
  if (cipher_.on()) {
    seal_frame(header, static_cast<const std::byte*>(buf), len);
    if (hub_->holding()) hub_->dirty(conn_);
    else conn_->flush();
    return {Post::kDone};
  }
  if (hold_frame(header, buf, len)) return {Post::kDone};
  if (out_off_ != out_.size()) return {Post::kError, absl::StatusCode::kResourceExhausted};
  iovec iov[2] = {{header, stream::kHeaderSize}, {const_cast<void*>(buf), len}};
  ssize_t n = send_iov(conn_->fd(), iov, len != 0 ? 2 : 1);
  if (n == static_cast<ssize_t>(stream::kHeaderSize + len)) return {Post::kDone};
  if (n <= 0) {
    if (!would_block(n)) conn_->fail(connection_ended(errno));
    return {Post::kError, would_block(n) ? absl::StatusCode::kResourceExhausted : absl::StatusCode::kUnavailable};
  }
  // Partly written: the rest is ours to send (the caller's buffer is on its stack).
  auto* s = new Send;
  std::memcpy(s->header, header, sizeof(header));
  s->owned.reset(new std::byte[std::max<std::size_t>(len, 1)]);
  if (len != 0) std::memcpy(s->owned.get(), buf, len);
  s->payload = s->owned.get();
  s->payload_len = len;
  tx_.push_back(s);
  tx_head_done_ = static_cast<std::size_t>(n);
  conn_->want_out(true);
  return {Post::kDone};
}

bool StreamWriter::hold_frame(const std::byte* header, const void* payload, std::size_t len) {
  // Small frames only (a copy each), behind nothing queued, and not beyond a bound.
  constexpr std::size_t kHoldFrameMax = 1024, kOutMax = std::size_t{256} * 1024;
  if (!hub_->holding() || !tx_.empty() || len > kHoldFrameMax || out_.size() > kOutMax) return false;
  if (out_off_ == out_.size()) {
    out_.clear();
    out_off_ = 0;
    hub_->dirty(conn_);
  }
  std::size_t at = out_.size();
  out_.resize(at + stream::kHeaderSize + len);
  std::memcpy(out_.data() + at, header, stream::kHeaderSize);
  if (len != 0) std::memcpy(out_.data() + at + stream::kHeaderSize, payload, len);
  return true;
}

void StreamWriter::queue(Send* s) {
  tx_.push_back(s);
  conn_->flush();  // when attached and usable
}

void StreamWriter::queue_ctrl(stream::Kind kind, std::uint32_t length, Tag tag, std::uint64_t id) {
  auto* s = new Send;
  stream::encode({kind, length, tag, id}, s->header);
  queue(s);
}

void StreamWriter::sent(Send* s) {
  if (TransportOp* op = s->op) {
    op->request = op->stream = nullptr;
    delete s;
    op->on_complete(op, absl::StatusCode::kOk, 0, 0);
    return;
  }
  delete s;
}

bool StreamWriter::cancel(TransportOp* op) {
  for (auto it = rts_sent_.begin(); it != rts_sent_.end(); ++it) {
    if (it->second->op != op) continue;
    delete it->second;
    rts_sent_.erase(it);
    op->request = op->stream = nullptr;
    op->on_complete(op, absl::StatusCode::kCancelled, 0, 0);
    return true;
  }
  for (std::size_t i = 0; i < tx_.size(); ++i) {
    if (tx_[i]->op != op) continue;
    bool begun = i == 0 && (tx_head_done_ != 0 || seal_head_started_);
    if (begun) return true;  // its bytes are partly on the wire: it completes when they all are
    delete tx_[i];
    tx_.erase(tx_.begin() + static_cast<std::ptrdiff_t>(i));
    op->request = op->stream = nullptr;
    op->on_complete(op, absl::StatusCode::kCancelled, 0, 0);
    return true;
  }
  return false;
}

// Writes what is queued; true when all of it went, false when the socket is full (or failed).
bool StreamWriter::flush_plain() {
  while (!tx_.empty() || out_off_ != out_.size()) {
    iovec iov[kMaxIov];
    int n = 0;
    const std::size_t held = out_.size() - out_off_;  // copied frames go first
    if (held != 0) iov[n++] = {out_.data() + out_off_, held};
    std::size_t skip = tx_head_done_;
    for (Send* s : tx_) {
      if (n + 2 > kMaxIov) break;
      std::size_t h = stream::kHeaderSize;
      if (skip < h) iov[n++] = {s->header + skip, h - skip};
      std::size_t from = skip > h ? skip - h : 0;
      if (s->payload_len > from) iov[n++] = {const_cast<std::byte*>(s->payload) + from, s->payload_len - from};
      skip = 0;
    }
    ssize_t w = send_iov(conn_->fd(), iov, n);
    if (w < 0) {
      if (!would_block(w)) conn_->fail(connection_ended(errno));
      return false;
    }
    auto left = static_cast<std::size_t>(w);
    std::size_t from_out = std::min(left, held);
    out_off_ += from_out;
    left -= from_out;
    if (out_off_ != out_.size()) return false;  // the socket is full
    while (!tx_.empty()) {
      Send* s = tx_.front();
      std::size_t rest = stream::kHeaderSize + s->payload_len - tx_head_done_;
      if (left < rest) {
        tx_head_done_ += left;
        return false;  // the socket took part of it: it is full
      }
      left -= rest;
      tx_head_done_ = 0;
      tx_.pop_front();
      sent(s);
      if (!conn_->usable()) return false;
    }
  }
  return true;
}

std::byte* StreamWriter::sealed_room(std::size_t n) {
  if (sealed_off_ == sealed_len_) sealed_off_ = sealed_len_ = 0;
  if (sealed_len_ + n <= sealed_cap_) return sealed_.get() + sealed_len_;
  // Move what waits to the front, into a larger buffer when that is not enough.
  std::size_t pending = sealed_len_ - sealed_off_;
  std::size_t cap = std::max(sealed_cap_, std::max(pending + n, kSealedCap + 2 * stream::kSealChunk));
  std::unique_ptr<std::byte[]> bigger(cap == sealed_cap_ ? nullptr : new std::byte[cap]);
  std::byte* to = bigger ? bigger.get() : sealed_.get();
  if (pending != 0) std::memmove(to, sealed_.get() + sealed_off_, pending);
  if (bigger) {
    sealed_ = std::move(bigger);
    sealed_cap_ = cap;
  }
  sealed_off_ = 0;
  sealed_len_ = pending;
  return sealed_.get() + sealed_len_;
}

void StreamWriter::seal_piece(const std::byte* src, std::size_t len) {
  std::byte* at = sealed_room(len + stream::kMacSize);
  cipher_.seal_to(at, src, len, at + len);
  sealed_len_ += len + stream::kMacSize;
}

void StreamWriter::seal_frame(const std::byte* header, const std::byte* payload, std::size_t len) {
  seal_piece(header, stream::kHeaderSize);
  for (std::size_t done = 0; done < len;) {
    std::size_t piece = std::min(stream::kSealChunk, len - done);
    seal_piece(payload + done, piece);
    done += piece;
  }
}

bool StreamWriter::seal_more() {
  bool added = false;
  while (!tx_.empty() && sealed_len_ - sealed_off_ < kSealedCap) {
    Send* s = tx_.front();
    if (!seal_head_started_) {
      seal_piece(s->header, stream::kHeaderSize);
      seal_head_started_ = true;
      seal_head_done_ = 0;
      added = true;
    }
    while (seal_head_done_ < s->payload_len && sealed_len_ - sealed_off_ < kSealedCap) {
      std::size_t piece = std::min(stream::kSealChunk, s->payload_len - seal_head_done_);
      seal_piece(s->payload + seal_head_done_, piece);
      seal_head_done_ += piece;
      added = true;
    }
    if (seal_head_done_ < s->payload_len) break;
    // Sealed whole: its bytes are copied, the caller's buffer is free.
    tx_.pop_front();
    seal_head_started_ = false;
    sent(s);
    if (!conn_->usable()) break;
  }
  return added;
}

bool StreamWriter::flush_sealed() {
  while (true) {
    seal_more();
    if (!conn_->usable()) return false;
    if (sealed_off_ == sealed_len_) return true;
    iovec iov{sealed_.get() + sealed_off_, sealed_len_ - sealed_off_};
    ssize_t w = send_iov(conn_->fd(), &iov, 1);
    if (w < 0) {
      if (!would_block(w)) conn_->fail(connection_ended(errno));
      return false;
    }
    sealed_off_ += static_cast<std::size_t>(w);
    if (sealed_off_ < sealed_len_) return false;
  }
}

}  // namespace sluice::detail
