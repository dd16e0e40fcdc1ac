// A front-door link after the handshake: what its close tells the other side. A side that
// closes its engine in order says goodbye first (door::kLinkGoodbye); a process that ends
// closes the link without it; any other byte on a link is a protocol violation.
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "door/door.h"

namespace sluice::detail {
namespace {

using std::chrono::seconds;

// Admits every client over UCX at index 7 and records how its link ended.
struct Server final : Door::Owner {
  absl::StatusOr<Door::Admitted> admit(const Door::Admission&) override { return Door::Admitted{7, door::Link::kUcx}; }
  void link_lost(std::uint32_t index, const std::string& why, bool goodbye) override {
    lost = Lost{index, why, goodbye};
  }
  void link_ready(std::uint32_t, int fd) override { ::close(fd); }
  struct Lost {
    std::uint32_t index;
    std::string why;
    bool goodbye;
  };
  std::optional<Lost> lost;
};

// Nothing is admitted on the client's side; it only dials.
struct Client final : Door::Owner {
  absl::StatusOr<Door::Admitted> admit(const Door::Admission&) override { return absl::InternalError("no"); }
  void link_lost(std::uint32_t, const std::string&, bool) override {}
  void link_ready(std::uint32_t, int fd) override { ::close(fd); }
};

class DoorLinks : public ::testing::Test {
 protected:
  void SetUp() override {
    DoorOptions o;
    o.worker_address = "server-address";
    server_door_.emplace(&server_, o, &stats_);
    absl::StatusOr<int> port = server_door_->listen("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status();
    o.worker_address = "client-address";
    client_door_.emplace(&client_, o, &stats_);
    ASSERT_TRUE(client_door_->dial("127.0.0.1", *port, 3, Clock::now() + seconds(10), "test").ok());
    poll_until([&] { return !client_door_->dialing(); });
    absl::StatusOr<Door::Dialed> dialed = client_door_->take_dial_result();
    ASSERT_TRUE(dialed.ok()) << dialed.status();
    ASSERT_EQ(dialed->index, 7u);
    ASSERT_TRUE(client_door_->has_link(3));
    poll_until([&] { return server_door_->has_link(7); });
    ASSERT_TRUE(server_door_->has_link(7));
  }

  // Polls both doors until `done` or 10 s.
  template <typename F>
  void poll_until(F done) {
    for (auto until = Clock::now() + seconds(10); !done() && Clock::now() < until;) {
      server_door_->poll(Clock::now());
      client_door_->poll(Clock::now());
      ::usleep(1000);
    }
  }

  Stats stats_;
  Server server_;
  Client client_;
  std::optional<Door> server_door_, client_door_;
};

TEST_F(DoorLinks, AnOrderlyCloseSaysGoodbyeBeforeTheLinkCloses) {
  client_door_->close_link(3, /*goodbye=*/true);
  poll_until([&] { return server_.lost.has_value(); });
  ASSERT_TRUE(server_.lost.has_value());
  EXPECT_EQ(server_.lost->index, 7u);
  EXPECT_TRUE(server_.lost->goodbye);
  EXPECT_FALSE(server_door_->has_link(7));
}

TEST_F(DoorLinks, ALinkClosedWithoutGoodbyeIsAProcessThatEnded) {
  client_door_->close_link(3, /*goodbye=*/false);
  poll_until([&] { return server_.lost.has_value(); });
  ASSERT_TRUE(server_.lost.has_value());
  EXPECT_FALSE(server_.lost->goodbye);
  EXPECT_EQ(server_.lost->why, "its connection to us closed");
}

}  // namespace
}  // namespace sluice::detail
