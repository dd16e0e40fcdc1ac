// sluice/bootstrap_service.h — the key-value and fence service sluice-run offers its ranks.
//
// A launcher creates one service for a job of `size` ranks. It listens on a private Unix
// socket (in a directory only the user can enter) and, for ranks on other hosts, on TCP
// (listen_tcp), and answers FENCE requests: each rank sends its key-value blob with the job's
// random token; when every rank has sent its blob for a fence, each gets all of them back.
// What a network service must hold, it holds: a connection's token is checked before more
// than its request line (at most 260 bytes) is read; connections that have not shown the token
// are bounded (2 x size + 16: beyond, those idle longest are closed, so a rank's fresh
// connection, which shows it at once, is always served however many others are held open); a
// connection that sends nothing for 10 s while not waiting for a fence is closed, and a
// reply that cannot be written within 10 s closes its connection. A request with a wrong
// token or a malformed frame is rejected, logged to stderr and its connection closed; the job
// is not disturbed.
//
// Threads: one thread drives the service (fds() in a poll loop, then handle()).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <sluice/api.h>
#include <sluice/status.h>

namespace sluice {

class SLUICE_API BootstrapService {
 public:
  static absl::StatusOr<std::unique_ptr<BootstrapService>> create(int size);
  virtual ~BootstrapService() = default;
  // What ranks need in their environment: SLUICE_BOOT_ADDR and SLUICE_BOOT_TOKEN. address()
  // is the Unix socket's path, for ranks on this host.
  virtual const std::string& address() const = 0;
  // Also listens on TCP at ip (port 0: any free one); returns the port. Ranks elsewhere use
  // SLUICE_BOOT_ADDR=tcp:HOST:PORT.
  virtual absl::StatusOr<int> listen_tcp(const std::string& ip, int port) = 0;
  virtual const std::string& token() const = 0;
  // File descriptors to poll for input (the listening socket and open connections).
  virtual std::vector<int> fds() const = 0;
  // Accepts connections and serves whatever requests are complete; never blocks.
  virtual void handle() = 0;
  // Requests rejected so far (bad token, malformed), and connections closed unserved (beyond
  // the bound on connections without a token, or idle).
  virtual int rejected() const = 0;
  virtual int closed_unserved() const = 0;
};

}  // namespace sluice
