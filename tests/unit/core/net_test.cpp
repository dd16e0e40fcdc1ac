// Host:port text: IPv4, names, IPv6 in brackets, and what is refused; how addresses print; and
// how a connection's end is named.
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "core/net.h"

namespace sluice::detail {
namespace {

TEST(ParseHostPort, NamesAndIpv4) {
  auto a = parse_host_port("127.0.0.1:13337");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 13337);
  auto b = parse_host_port("node7:0");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "node7");
  EXPECT_EQ(b->port, 0);
  auto any = parse_host_port(":65535");  // no host: every interface
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(any->host, "");
  EXPECT_EQ(any->port, 65535);
}

TEST(ParseHostPort, Ipv6InBrackets) {
  for (auto [text, host, port] :
       {std::tuple{"[::1]:0", "::1", 0}, std::tuple{"[::]:80", "::", 80},
        std::tuple{"[fe80::1%eth0]:9", "fe80::1%eth0", 9}, std::tuple{"[2001:db8::7]:65535", "2001:db8::7", 65535}}) {
    auto hp = parse_host_port(text);
    ASSERT_TRUE(hp.ok()) << text << ": " << hp.status();
    EXPECT_EQ(hp->host, host) << text;
    EXPECT_EQ(hp->port, port) << text;
  }
}

TEST(ParseHostPort, RefusesWhatIsNotHostPortNamingIt) {
  for (const char* text : {"no-port", "host:", "host:65536", "host:-1", "host:+1", "host: 1", "host:1x", "[::1]",
                           "[::1]0", "[::1:0", "", "[::1]:99999999999999999999"}) {
    auto hp = parse_host_port(text);
    EXPECT_EQ(hp.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(hp.status().message().find(std::string("'") + text + "'"), std::string::npos) << hp.status();
  }
  // An IPv6 address without brackets is ambiguous ("::1:0"): refused, showing the brackets.
  auto bare = parse_host_port("::1:0");
  EXPECT_EQ(bare.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bare.status().message().find("[::1]:0"), std::string::npos) << bare.status();
}

TEST(FormatHostPort, BracketsIpv6AndReadsBack) {
  EXPECT_EQ(format_host_port("127.0.0.1", 5), "127.0.0.1:5");
  EXPECT_EQ(format_host_port("node7", 0), "node7:0");
  EXPECT_EQ(format_host_port("::1", 13337), "[::1]:13337");
  auto back = parse_host_port(format_host_port("2001:db8::7", 42));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->host, "2001:db8::7");
  EXPECT_EQ(back->port, 42);
}

TEST(TcpSockets, ErrorsNameIpv6AddressesInBrackets) {
  auto first = tcp_listen("::1", 0);
  if (!first.ok()) GTEST_SKIP() << "this machine has no IPv6 loopback: " << first.status();
  auto second = tcp_listen("::1", first->port);  // the port is taken
  ::close(first->fd);
  ASSERT_FALSE(second.ok());
  std::string want = "cannot listen on [::1]:" + std::to_string(first->port);
  EXPECT_NE(second.status().message().find(want), std::string::npos) << second.status();
}

// What a port scan of this process would find: its own listening sockets, by address, and no
// other process's (a child's listener on this host is not listed), nor one it closed.
TEST(ListeningTcpSockets, ListsThisProcesssListenersOnly) {
  auto mine = tcp_listen("127.0.0.1", 0);
  ASSERT_TRUE(mine.ok()) << mine.status();
  int up[2], down[2];  // the child's port up; the parent's "done" down (its end closing)
  ASSERT_EQ(::pipe(up), 0);
  ASSERT_EQ(::pipe(down), 0);
  pid_t child = ::fork();
  if (child == 0) {  // another process, listening until its parent is done
    ::close(down[1]);
    auto theirs = tcp_listen("127.0.0.1", 0);
    int port = theirs.ok() ? theirs->port : -1;
    (void)!::write(up[1], &port, sizeof port);
    char byte;
    (void)!::read(down[0], &byte, 1);
    ::_exit(0);
  }
  ::close(up[1]);
  ::close(down[0]);
  int theirs = -1;
  ASSERT_EQ(::read(up[0], &theirs, sizeof theirs), static_cast<ssize_t>(sizeof theirs));
  ASSERT_GT(theirs, 0);
  std::vector<std::string> listed = listening_tcp_sockets();
  std::string all;
  for (const std::string& s : listed) all += s + " ";
  std::string own = "127.0.0.1:" + std::to_string(mine->port), other = "127.0.0.1:" + std::to_string(theirs);
  EXPECT_NE(std::find(listed.begin(), listed.end(), own), listed.end()) << "listed: " << all;
  EXPECT_EQ(std::find(listed.begin(), listed.end(), other), listed.end()) << "listed: " << all;
  ::close(down[1]);
  ::close(up[0]);
  ::waitpid(child, nullptr, 0);
  ::close(mine->fd);
  listed = listening_tcp_sockets();
  EXPECT_EQ(std::find(listed.begin(), listed.end(), own), listed.end()) << "a closed listener is gone";
}

// The end a reader sees when the other side closes: FIN, or RST when it left data unread (what a
// killed process's kernel does).
std::string end_seen(bool leave_data_unread) {
  auto server = tcp_listen("127.0.0.1", 0);
  EXPECT_TRUE(server.ok()) << server.status();
  auto client = tcp_start_connect("127.0.0.1", server->port);
  EXPECT_TRUE(client.ok()) << client.status();
  int accepted = ::accept(server->fd, nullptr, nullptr);
  EXPECT_GE(accepted, 0);
  pollfd writable{*client, POLLOUT, 0};
  EXPECT_EQ(::poll(&writable, 1, 5000), 1);
  if (leave_data_unread) {
    EXPECT_EQ(::send(*client, "x", 1, 0), 1);
    pollfd readable{accepted, POLLIN, 0};
    EXPECT_EQ(::poll(&readable, 1, 5000), 1);  // it arrived, and is never read
  }
  ::close(accepted);
  pollfd ended{*client, POLLIN, 0};
  EXPECT_EQ(::poll(&ended, 1, 5000), 1);
  char byte;
  ssize_t n = ::recv(*client, &byte, 1, 0);
  std::string why = connection_ended(n == 0 ? 0 : errno);
  ::close(*client);
  ::close(server->fd);
  return why;
}

TEST(ConnectionEnded, NamesAClosedAndAResetConnectionAndOtherErrors) {
  EXPECT_EQ(end_seen(false), "its connection to us closed");
  EXPECT_EQ(end_seen(true), "its connection to us was reset");
  EXPECT_EQ(connection_ended(ETIMEDOUT), std::string("its connection failed: ") + std::strerror(ETIMEDOUT));
}

}  // namespace
}  // namespace sluice::detail
