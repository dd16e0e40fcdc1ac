// The watch over a UCX worker's shared-memory receive FIFO (Worker::check_fifo; UCX only).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "transport/transport.h"

namespace sluice::detail {

// A second worker, of a context of its own, with an endpoint to the main worker, that sends
// one probe at a time through the main worker's FIFO into a receive posted there. In-process, it goes
// through the same shared-memory transport as other local processes: self (UCX's loopback)
// reaches only its own worker.
class FifoWatch {
 public:
  // The probe's tag: class 15, which no Sluice message carries (lib/wire/wire.h), so that no
  // receive of the engine takes it and it takes nothing of the engine's.
  static constexpr Tag kProbeTag = Tag{0xf} << 60;

  // nullptr when the main worker is not reached through a shared-memory FIFO (UCX has no
  // sysv or posix transport here), or the second worker cannot be made (logged).
  static std::unique_ptr<FifoWatch> create(const TransportContext& main_ctx, void* main, const std::string& address);
  ~FifoWatch();
  FifoWatch(const FifoWatch&) = delete;
  FifoWatch& operator=(const FifoWatch&) = delete;

  Worker::Fifo check(std::chrono::steady_clock::duration stall_after);
  void stopped() { stalled_ = true; }
  Worker::FifoProbe probe() const { return {sent_, through_sent_}; }
  // The probe's receive completed (its callback).
  void arrived() { rx_ = nullptr; }

 private:
  FifoWatch() = default;
  void* main_ = nullptr;     // the watched worker (not owned)
  void* context_ = nullptr;  // the probe's UCX context: sysv and posix only
  void* probe_ = nullptr;    // the second worker, of context_
  Endpoint ep_;              // from probe_ to main_
  void* rx_ = nullptr;       // the receive's request on main_, while it waits for the probe
  std::uint64_t rx_buf_ = 0, tx_buf_ = 0;
  std::chrono::steady_clock::time_point sent_{};          // the probe's in flight, or the last's
  std::chrono::steady_clock::time_point through_sent_{};  // the last probe's that came through
  bool stalled_ = false;
};

}  // namespace sluice::detail
