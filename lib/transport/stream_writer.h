// The stream transport's sending half (internal): what one connection (stream.h) has to write,
// and how. Eager frames go at once from the caller's buffer (writev); a larger message is
// announced (RTS) and waits here until the receiver clears it (CTS); everything leaves in
// order. Encrypted, frames are sealed into a buffer piece by piece as the socket takes them.
//
// The connection owns the socket and its lifecycle (attached, failed, closed); the writer owns
// the frames, the transfers awaiting their CTS and the sending cipher. It asks the connection
// whether it may write and fails it when a write fails.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "transport/stream_crypto.h"
#include "transport/stream_frame.h"
#include "transport/transport.h"

namespace sluice::detail {

class StreamConn;
class StreamHub;

class StreamWriter {
 public:
  // `eager_max`: the largest message sent at once; larger ones wait for the receiver's CTS.
  StreamWriter(StreamConn* conn, StreamHub* hub, stream::Cipher cipher, std::size_t eager_max);
  ~StreamWriter();  // frees what waits; calls nothing back
  StreamWriter(const StreamWriter&) = delete;
  StreamWriter& operator=(const StreamWriter&) = delete;

  PostResult post_send(TransportOp* op, const void* buf, std::size_t len, Tag tag);
  PostResult send_now(const void* buf, std::size_t len, Tag tag);
  // A control frame (a CTS), behind what waits.
  void queue_ctrl(stream::Kind kind, std::uint32_t length, Tag tag, std::uint64_t id);
  // The receiver cleared transfer `id`: its DATA frame is queued. False when no announced
  // transfer is `id`.
  bool cleared(std::uint64_t id);
  // A send not yet begun is taken back (kCancelled); false when `op` is no send of ours. One
  // whose bytes are partly on the wire stays, and completes when they all are.
  bool cancel(TransportOp* op);
  // The connection closes: every send still open completes with kCancelled.
  void cancel_all();
  // Writes what waits as far as the socket takes it; true when all of it went.
  bool write();

 private:
  struct Send;
  Send* new_send(TransportOp* op, const std::byte* payload, std::size_t len);
  void queue(Send* s);
  // While the hub holds sends: a small frame is copied into out_ (it has left, as far as the
  // caller is concerned) and the connection written once, at release. False when it cannot.
  bool hold_frame(const std::byte* header, const void* payload, std::size_t len);
  bool flush_plain();
  bool flush_sealed();
  // Appends sealed frames to the seal buffer while there is room; false when nothing was added.
  bool seal_more();
  // Seals one whole frame into the seal buffer (a copy of its payload).
  void seal_frame(const std::byte* header, const std::byte* payload, std::size_t len);
  // Room for `n` more sealed bytes at the end (what is written is dropped from the front first).
  std::byte* sealed_room(std::size_t n);
  // Seals `len` bytes of `src` (a header or a body piece) and its tag onto the end.
  void seal_piece(const std::byte* src, std::size_t len);
  // `s` has left: its op completes (kOk) and it is freed.
  void sent(Send* s);

  StreamConn* conn_;
  StreamHub* hub_;
  std::size_t eager_max_;
  std::vector<std::byte> out_;  // plain: copied frames, written before tx_
  std::size_t out_off_ = 0;
  std::deque<Send*> tx_;                               // frames to write, in order
  std::unordered_map<std::uint64_t, Send*> rts_sent_;  // transfers waiting for their CTS
  std::uint64_t next_transfer_ = 1;
  std::size_t tx_head_done_ = 0;  // plain: bytes of tx_.front() written
  stream::Cipher cipher_;
  // Sealed bytes not yet written: [sealed_off_, sealed_len_) of sealed_ (grown, never zeroed).
  std::unique_ptr<std::byte[]> sealed_;
  std::size_t sealed_cap_ = 0, sealed_len_ = 0, sealed_off_ = 0;
  std::size_t seal_head_done_ = 0;  // sealed: payload bytes of tx_.front() sealed (header first)
  bool seal_head_started_ = false;
};

}  // namespace sluice::detail
