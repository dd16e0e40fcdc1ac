// The front door's client side (internal to lib/door): one dial at a time, from the TCP connect
// to the server's ACCEPT or REFUSE. The Door owns it, hands it its connection's events (kConnTag
// with kDialId) and its deadline, and turns a finished dial over UCX into a link.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "door/door.h"

namespace sluice::detail {

class Dialer {
 public:
  // `options` is the Door's; the counters are its door.bad_frames and door.refused_auth.
  Dialer(const DoorOptions& options, int epoll_fd, Counter* bad_frames, Counter* refused_auth);
  ~Dialer();
  Dialer(const Dialer&) = delete;
  Dialer& operator=(const Dialer&) = delete;

  // As Door::dial.
  absl::Status start(const std::string& host, int port, std::uint32_t our_index, Clock::time_point deadline,
                     std::string limit);
  bool dialing() const { return conn_ != nullptr; }
  // When the dial must end at the latest, or max() when none is under way.
  Clock::time_point deadline() const;
  void on_event(std::uint32_t events);
  // Ends the dial with DeadlineExceeded when `now` is past its deadline.
  void expire(Clock::time_point now);
  // The finished dial's result and our index in it; with Link::kUcx, `fd` is still in the epoll
  // set and is to become that index's link.
  absl::StatusOr<Door::Dialed> take_result();
  std::uint32_t our_index() const { return our_index_; }

 private:
  absl::Status connect(Clock::time_point deadline);
  void connected();
  // A server that resets or closes the connection before any byte of its SERVER_HELLO has not
  // taken our hello (a door sheds connections without one under a flood): dials again, at most
  // kMaxRedials times within the deadline, after a pause that doubles from kFirstPause (half to
  // one and a half of it, at random), so that clients shed together do not return together.
  // False when it may not, and the dial is to end.
  bool redial();
  bool pausing() const;       // between a shed dial and the next
  bool before_hello() const;  // nothing of the server's hello has come
  // Redials, or ends the dial: the server `why` ("closed the connection") during the handshake.
  void closed(const std::string& why);
  void frame();
  void server_hello();
  void answer();
  void malformed(door::Parse p);
  void denied(const std::string& why);
  void end(absl::StatusOr<Door::Dialed> result);
  bool auth_on() const { return options_.auth != door::AuthMode::kOff && options_.key != nullptr; }

  const DoorOptions& options_;
  int epoll_fd_;
  Counter* bad_frames_;
  Counter* refused_auth_;
  std::unique_ptr<DoorConn> conn_;  // the dial under way
  std::string host_;                // where it goes
  int port_ = 0;
  int redials_ = 0;
  static constexpr int kMaxRedials = 8;
  static constexpr Duration kFirstPause = std::chrono::milliseconds(2);
  Clock::time_point redial_at_;  // while pausing()
  std::minstd_rand jitter_;      // where each pause falls in its range
  std::uint32_t our_index_ = 0;
  std::string limit_;  // what its deadline is called
  std::optional<absl::StatusOr<Door::Dialed>> result_;
};

}  // namespace sluice::detail
