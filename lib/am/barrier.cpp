// Engine::barrier()'s engine side (am/barrier.h): entering, the words, leaving.

#include <cstring>

#include <absl/strings/str_format.h>

#include "am/engine_core.h"
#include "core/log.h"

namespace sluice::detail {

std::uint64_t EngineCore::barrier_enter() { return barrier_.enter(peers_.ranks(), rank()); }

absl::Status EngineCore::barrier_status(std::uint64_t epoch, bool* done) {
  *done = false;
  for (int r = 0; r < peers_.ranks(); ++r) {
    PeerData& p = *peers_.by_rank(r);
    if (r != rank() && p.state == PeerState::kDead)
      return absl::UnavailableError(absl::StrFormat("barrier %u: %s failed: %s", epoch, p.name, p.link.fail_reason()));
    if (!barrier_.unsent(r)) continue;
    Result sent = send(p, kBarrierHandler, {}, std::as_bytes(std::span(&epoch, 1)), SendCallback(), PayloadCopy::kPool);
    if (sent == Result::kOk) barrier_.sent(r);
    else if (sent != Result::kWouldBlock)
      return absl::UnavailableError(
          absl::StrFormat("barrier %u: cannot reach %s (%s)", epoch, p.name, to_string(sent)));
  }
  if (barrier_.arrivals(epoch) + 1 < static_cast<std::uint64_t>(peers_.ranks())) return absl::OkStatus();
  barrier_.leave(epoch);
  *done = true;
  return absl::OkStatus();
}

absl::Status EngineCore::barrier_timed_out(std::uint64_t epoch) {
  return absl::DeadlineExceededError(absl::StrFormat("barrier %u: %u of the %d other ranks arrived before the deadline",
                                                     epoch, barrier_.arrivals(epoch), peers_.ranks() - 1));
}

void EngineCore::barrier_word(const Message& m) {
  std::uint64_t epoch = 0;
  if (m.s_.peer >= static_cast<std::uint32_t>(peers_.ranks()) || m.s_.payload.size() != sizeof(epoch)) {
    c_.parse_errors->add();
    SLUICE_LOG_RATE_LIMITED(kWarn, "am", "%s sent a barrier word (%u bytes) it cannot send: dropped",
                            peers_.at(m.s_.peer).name, m.s_.payload.size());
    return;
  }
  std::memcpy(&epoch, m.s_.payload.data(), sizeof(epoch));
  barrier_.arrived(epoch, static_cast<int>(m.s_.peer));
}

}  // namespace sluice::detail
