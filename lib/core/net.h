// TCP sockets (internal): a listening socket and a non-blocking connect, shared by the front
// door and sluice-run's bootstrap service and its clients.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sluice/status.h>

namespace sluice::detail {

struct HostPort {
  std::string host;  // without brackets ("::1", "10.0.0.1", "node7"); empty: every interface
  int port;
};

// Parses "host:port", "[IPv6]:port" or ":port" (port 0-65535). An IPv6 address needs its
// brackets ("::1:0" is refused, saying so); InvalidArgument naming the text otherwise.
absl::StatusOr<HostPort> parse_host_port(std::string_view text);

// "host:port", or "[host]:port" when the host has a colon (an IPv6 address): how every
// address is printed, and what parse_host_port reads back.
std::string format_host_port(std::string_view host, int port);

struct Listening {
  int fd;
  int port;  // the one bound (port 0 asks for any free one)
};

// A non-blocking, close-on-exec socket listening on host:port (empty host: every interface),
// SO_REUSEADDR so that a restarted server listens again at once; with `share_port` also
// SO_REUSEPORT, so that others that set it may listen on the same port. InvalidArgument when
// the host does not resolve, Unavailable when it cannot be bound; both say "cannot listen on
// HOST:PORT" (and, for a port in use, whether sharing was asked).
absl::StatusOr<Listening> tcp_listen(const std::string& host, int port, bool share_port = false);

// Starts connecting a non-blocking, close-on-exec socket to host:port: the socket, its
// connection in progress (poll it for POLLOUT, then read SO_ERROR). Unavailable, saying
// "cannot connect to HOST:PORT", when the host does not resolve or the connect fails at once.
absl::StatusOr<int> tcp_start_connect(const std::string& host, int port);

// Why a peer's connection ended, for a read that returned 0 (err 0) or failed with errno err:
// "its connection to us closed", "... was reset" (ECONNRESET, EPIPE: the peer's process died
// with data unread, or aborted), or "its connection failed: <strerror>".
std::string connection_ended(int err);

// Listening TCP sockets: {inode, "address:port"}.
using ListenSockets = std::vector<std::pair<std::string, std::string>>;
// Every listening TCP socket of this network namespace, any process's (the kernel's socket
// diagnostics, else /proc/net/tcp{,6}).
ListenSockets all_listening_tcp_sockets();
// The addresses of those of `among` that this process holds (its sockets from /proc/self/fd: a
// readlink per descriptor, skipped when `among` is empty).
std::vector<std::string> held_here(const ListenSockets& among);
// The TCP sockets this process listens on, as "address:port": what a port scan of the process
// finds. Empty when /proc cannot be read.
std::vector<std::string> listening_tcp_sockets();

}  // namespace sluice::detail
