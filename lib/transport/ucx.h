// UCX-specific helpers (internal): status conversion, the library's version, the
// shared-memory FIFO size. The one file that includes UCX headers besides ucx.cpp is
// ucx_status.cpp, which implements these for both transports.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <sluice/status.h>

namespace sluice::detail {

// The one conversion from a UCX status (passed as its integer value) to a Sluice status.
absl::StatusCode ucx_status_code(int ucs_status);
absl::Status ucx_status(int ucs_status, std::string_view what);
const char* ucx_status_name(int ucs_status);

std::string ucx_library_version();

// The receive FIFO size (UCX_MM_FIFO_SIZE) the context asks of UCX's shared-memory transports.
//
// Why: when UCX fails an endpoint itself (as it did for client/server peers connected through
// its sockaddr connection manager, whose socket closes as the peer dies), it destroys the
// shared-memory lane only after flushing it, and that flush (uct_mm_ep_flush, the same in
// UCX's current source; 1.13.1 behaves so) answers NO_RESOURCE for as long as the dead peer's
// FIFO is full, which is for ever: the peer's FIFO and receive buffers stay mapped here until
// the worker is destroyed (~2 MB resident each; docs/reliability.md).
//
// What one process can leave unconsumed in one peer's FIFO is bounded by the credits: at most
// `credits` unreleased messages to it, each with UCX's rendezvous request beside it when its
// payload is large, UCX's acknowledgements of as many of the peer's own payloads, and a few
// control messages (credit returns, heartbeats, close). The receiver moves the tail the sender
// sees only every half FIFO, so the FIFO holds twice that: 2 × (3 × credits + 16), rounded up
// to a power of two, at least UCX's 64 and at most kShmFifoMax — 256 for the default 32
// credits, which costs no memory over 64 (UCX allocates receive buffers 512 at a time).
// The bound is per sender: a FIFO that several local processes stream into can still fill
// (docs/reliability.md, "Not done yet").
inline constexpr std::uint32_t kShmFifoMax = 1024;
std::uint32_t shm_fifo_size(std::uint32_t credits);
// The inverse: the most credits one sender may hold while what it can leave unconsumed fits
// in half a FIFO of `fifo` elements (at least shm_fifo_size's `credits` below kShmFifoMax).
// Loans to a peer that sends through our FIFO stop there (CreditBank::credit_cap).
std::uint32_t shm_fifo_credits(std::uint32_t fifo);

// Whether `fd` is a Unix datagram socket: UCX's shared-memory wake-up sockets are
// (Worker::drain_wakeups, ucx_wake.cpp).
bool unix_datagram(int fd);

}  // namespace sluice::detail
