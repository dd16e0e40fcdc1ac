// The stream transport (internal): Sluice's own tagged messaging over one TCP connection per
// peer, for client/server peers that shared memory cannot reach. It runs on the connection the
// front door authenticated, so no port but the door is ever open, and keeps the promises UCX
// keeps for the protocol above it (transport.h): tagged sends and receives matched in posting
// order, completion in place or through the op's callback inside Worker::progress(),
// cancellation, endpoint failure through the error callback.
//
// Frames (stream_frame.h): small messages go EAGER and are copied once, from the read-ahead
// buffer into the posted receive, as UCX's eager protocol copies once. A message above the
// sender's eager bound waits at the sender (RTS) until the receiver has posted its buffer
// (CTS), then moves once: writev from the caller's buffer, recv straight into the posted
// buffer. While a DATA frame may arrive (a CTS is outstanding) the reader reads exact frame
// headers, never ahead, so no byte of such a payload passes through an intermediate buffer.
//
// Memory: what arrives for no posted receive is held (EAGER bytes, RTS announcements) up to
// StreamOptions::unexpected_max bytes; a peer that sends more than that (more than its credits
// allow) fails, it is never buffered. Frames are checked before their bodies are read: an
// unknown kind, a reserved byte, an EAGER frame above frame_max, a CTS or DATA for no transfer,
// a DATA of another length than announced fail the connection.
//
// Threading: one thread, the worker's. All sockets are in one epoll set (StreamHub::fd()).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "transport/stream_crypto.h"
#include "transport/stream_frame.h"
#include "transport/stream_writer.h"
#include "transport/transport.h"

namespace sluice::detail {

class StreamHub;

// A posted receive, and an arrived message no receive has taken yet.
struct StreamRecv {
  TransportOp* op = nullptr;
  std::byte* buf = nullptr;
  std::size_t len = 0;
  Tag tag = 0, mask = 0;
  std::size_t announced = 0;  // bound to a transfer: the length its RTS announced
};
struct StreamMsg {
  Tag tag = 0;
  std::size_t length = 0;
  std::uint64_t transfer = 0;          // an RTS: the sender's transfer id; 0: EAGER
  std::unique_ptr<std::byte[]> bytes;  // EAGER
  class StreamConn* conn = nullptr;
};

// One connection: its socket and lifecycle (attached, failed, closed), and its reading half:
// the receives posted, the messages arrived for none, the frame being read. Its writing half
// is its StreamWriter.
class StreamConn {
 public:
  StreamConn(StreamHub* hub, StreamOptions options, Endpoint::ErrorCallback on_error, void* arg);
  ~StreamConn();  // closes the socket; calls nothing back
  StreamConn(const StreamConn&) = delete;
  StreamConn& operator=(const StreamConn&) = delete;

  // The connected socket (made non-blocking); what was sent before goes out now.
  void attach(int fd);
  int fd() const { return fd_; }
  const StreamOptions& options() const { return options_; }
  bool failed() const { return failed_; }
  // It failed because the peer closed the connection between two frames (an orderly end, as
  // far as the stream can tell: what it sent before may still wait for receives).
  bool closed_by_peer() const { return closed_by_peer_; }
  // Bytes held for messages no receive has taken (at most StreamOptions::unexpected_max).
  std::size_t unexpected_bytes() const { return unexpected_bytes_; }
  const std::string& failure() const { return failure_; }

  // Whether it may still send and receive: attached or not yet, but neither failed nor closed.
  bool usable() const { return !failed_ && !closed_; }

  PostResult post_send(TransportOp* op, const void* buf, std::size_t len, Tag tag) {
    return writer_.post_send(op, buf, len, tag);
  }
  PostResult send_now(const void* buf, std::size_t len, Tag tag) { return writer_.send_now(buf, len, tag); }
  PostResult post_recv(TransportOp* op, void* buf, std::size_t len, Tag tag, Tag mask);
  // The first unexpected message matching (tag, mask), removed from the queue; nullptr if none.
  StreamMsg* take_unexpected(Tag tag, Tag mask);
  bool has_unexpected(Tag tag, Tag mask) const;
  PostResult recv_message(TransportOp* op, StreamMsg* msg, void* buf, std::size_t len);
  void cancel(TransportOp* op);
  // Force close: every send and receive still open completes with kCancelled (callbacks run
  // now); the socket closes.
  void close();
  // Writes what waits (the hub's release of held sends), and watches for the socket's room
  // while some of it still waits.
  void flush();
  // Fails the connection (failure() says why) and calls its error callback, now; nothing more
  // is read or written.
  void fail(const std::string& why);
  // Whether epoll reports the socket writable (while the writer has bytes the socket did not take).
  void want_out(bool on);

  // epoll readiness.
  void on_readable();
  void on_writable();

 private:
  enum class Sink : std::uint8_t { kRecv, kUnexpected, kDiscard };
  // The reader: a frame header, then its body piece by piece.
  bool read_header();
  bool read_body();
  bool handle_header(const stream::Header& h);
  bool on_eager(const stream::Header& h);
  bool on_rts(const stream::Header& h);
  void begin_body(Sink sink, std::byte* dst, std::size_t len);
  void finish_body();
  // Reads up to n bytes into dst: the read-ahead buffer first, then the socket (refilling the
  // read-ahead buffer when `ahead` and nothing is owed to a DATA frame). Returns bytes read;
  // 0 with `would_block_` set when the socket has nothing now, or after a failure.
  std::size_t take(std::byte* dst, std::size_t n, bool ahead);
  void complete_recv(const StreamRecv& r, absl::StatusCode code, std::size_t length, Tag tag);
  // The first posted receive matching `tag`, taken out of the list; false when none does.
  bool take_posted(Tag tag, StreamRecv* out);
  void add_unexpected(std::unique_ptr<StreamMsg> m);
  void clear_to_send(StreamRecv r, std::uint64_t transfer, std::size_t length, Tag tag);

  StreamHub* hub_;
  StreamOptions options_;
  Endpoint::ErrorCallback on_error_;
  void* arg_;
  int fd_ = -1;
  bool failed_ = false, closed_ = false, out_armed_ = false, closed_by_peer_ = false;
  std::string failure_;

  // Receiving.
  std::deque<StreamRecv> posted_;                           // in posting order
  std::unordered_map<std::uint64_t, StreamRecv> awaiting_;  // by transfer id: CTS sent, DATA due
  std::deque<std::unique_ptr<StreamMsg>> unexpected_;
  std::size_t unexpected_bytes_ = 0;
  std::unique_ptr<std::byte[]> ahead_;  // read-ahead buffer
  std::size_t ahead_begin_ = 0, ahead_end_ = 0;
  std::byte hdr_[stream::kHeaderSize + stream::kMacSize];
  std::size_t hdr_have_ = 0;
  bool in_body_ = false;
  bool would_block_ = false;
  bool drained_ = false;  // this readiness event's last read came back short
  stream::Header cur_{};
  Sink sink_ = Sink::kDiscard;
  StreamRecv body_recv_{};               // Sink::kRecv
  std::unique_ptr<StreamMsg> body_msg_;  // Sink::kUnexpected
  std::byte* body_dst_ = nullptr;
  std::size_t body_len_ = 0, body_done_ = 0, piece_have_ = 0, mac_have_ = 0;
  std::byte mac_[stream::kMacSize];
  std::unique_ptr<std::byte[]> scratch_;  // discarded bodies land here, a piece at a time
  stream::Cipher rx_cipher_;

  // Sending: declared after options_, which it is made from.
  StreamWriter writer_;
};

class StreamHub {
 public:
  StreamHub();
  ~StreamHub();
  StreamHub(const StreamHub&) = delete;
  StreamHub& operator=(const StreamHub&) = delete;

  int fd() const { return epoll_fd_; }
  StreamConn* open(StreamOptions options, Endpoint::ErrorCallback on_error, void* arg);
  // Closes (force) and forgets a connection; its memory goes at the next progress().
  void close(StreamConn* c);
  void watch(StreamConn* c, std::uint32_t events, bool add);
  // Reads and writes what the connections are ready for. epoll_wait is a system call (1-3 us
  // here): after kQuietLooks looks in a row found nothing it looks only every 2nd, 4th, ...
  // 16th pass, so an engine busy with UCX traffic beside quiet stream peers, or waking for
  // timers, does not pay one per pass; stream traffic itself is looked for on every pass.
  bool progress();
  // The engine slept on fd() beside other fds and woke: for this one (`ready`), the next
  // progress() looks; for another, the sleep's poll has just looked, and the next kMaxSkip
  // passes leave the hub alone (an idle server among 1,000 clients polled about 11 times a wake).
  void woke(bool ready) {
    if (ready) {
      skipped_ = skip_;
    } else {
      skip_ = kMaxSkip;
      skipped_ = 0;
    }
  }
  // Sends made between hold() and release() (the replies of one pass of handlers) are written
  // once per connection at release: one system call for many small messages.
  void hold() { holding_ = true; }
  void release();
  bool holding() const { return holding_; }
  void dirty(StreamConn* c) { dirty_.push_back(c); }
  StreamMsg* take_unexpected(Tag tag, Tag mask);
  bool has_unexpected(Tag tag, Tag mask) const;

 private:
  int epoll_fd_ = -1;
  std::vector<StreamConn*> conns_;
  std::vector<StreamConn*> closed_;
  bool holding_ = false;
  std::vector<StreamConn*> dirty_;          // written at release()
  static constexpr int kMaxSkip = 15;       // a quiet hub is looked at every 16th pass at the least
  static constexpr int kQuietLooks = 1024;  // a millisecond or more of passes
  int skip_ = 0;                            // passes left out between looks
  int skipped_ = 0;                         // passes left out since the last look
  int empty_looks_ = 0;                     // looks in a row that found nothing
};

}  // namespace sluice::detail
