// The front door's connections in handshake (internal to lib/door): what door.cpp (events,
// links), serve.cpp (the server side) and dial.cpp (the client's Dialer) share, and reading and
// writing their frames (conn.cpp).
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

#include "door/door.h"

namespace sluice::detail {

// epoll data: what an event is about, in the top two bits.
inline constexpr std::uint64_t kListenTag = 1ull << 62;
inline constexpr std::uint64_t kConnTag = 2ull << 62;
inline constexpr std::uint64_t kLinkTag = 3ull << 62;
inline constexpr std::uint64_t kTagMask = 3ull << 62;

inline void no_delay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// A REFUSE's code as a status code (anything unknown is kUnknown).
inline absl::StatusCode code_from_refuse(std::uint16_t v) {
  return v == 0 || v > 16 ? absl::StatusCode::kUnknown : static_cast<absl::StatusCode>(v);
}

// The dial's connection: its events carry kConnTag with this id (a server connection's is >= 1).
inline constexpr std::uint64_t kDialId = 0;

// A connection in its pre-handshake, on either side.
struct DoorConn {
  enum class Step : std::uint8_t {
    kConnecting,       // client: TCP connect in progress
    kWantClientHello,  // server
    kWantClientProof,  // server
    kWantServerHello,  // client
    kWantAnswer,       // client: ACCEPT or REFUSE
    kClosing,          // server: ACCEPT or REFUSE being written, then link or close
  };
  std::uint64_t id = 0;
  int fd = -1;
  Step step = Step::kWantClientHello;
  Clock::time_point deadline{};
  Clock::time_point accepted{};  // server
  std::string name;              // the other side's address
  std::string source;            // server: the client's address without its port
  std::vector<std::byte> in;
  door::FrameHeader header;
  bool have_header = false;
  std::vector<std::byte> out;
  std::size_t out_off = 0;
  bool want_out = false;  // EPOLLOUT is watched
  door::Nonce client_nonce{}, server_nonce{};
  std::uint32_t link_index = 0;        // server, kClosing: the index whose link this becomes
  bool becomes_link = false;           // server, kClosing after ACCEPT
  door::Link link = door::Link::kUcx;  // server, after ACCEPT: a stream goes to the owner
  bool peer_authenticated = false;
  door::AuthMode server_mode = door::AuthMode::kOff;  // client: what the server asked for

  // The body of the frame just read.
  std::span<const std::byte> body() const { return {in.data() + door::kFrameHeaderSize, header.body_len}; }
};

// Adds `fd` to the epoll set (`add`) or changes what it is watched for.
void watch(int epoll_fd, int fd, std::uint64_t tag, std::uint32_t events, bool add);

enum class FrameRead { kFrame, kMore, kClosed, kBad };
// Reads what is missing of the current frame (never beyond it); `why` says what ended a
// kClosed or kBad.
FrameRead read_frame(DoorConn& c, std::string* why);
// Writes what `c.out` holds as far as the socket takes it, watching for EPOLLOUT while some is
// left; false when the other side is gone.
bool flush(DoorConn& c, int epoll_fd);

}  // namespace sluice::detail
