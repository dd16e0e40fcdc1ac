// Engine::barrier()'s engine side (am/barrier.h): entering, the words, leaving.

#include <cstring>

#include <absl/strings/str_format.h>

#include "am/engine_core.h"
#include "core/log.h"

namespace sluice::detail {

std::uint64_t RankBarrier::enter() { return barrier_.enter(engine().peers_.ranks(), engine().rank()); }

absl::Status RankBarrier::status(std::uint64_t epoch, bool* done) {
  *done = false;
  for (int r = 0; r < engine().peers_.ranks(); ++r) {
    PeerData& p = *engine().peers_.by_rank(r);
    if (r != engine().rank() && p.state() == PeerState::kDead)
      return absl::UnavailableError(
          absl::StrFormat("barrier %u: %s failed: %s", epoch, p.name(), p.link.fail_reason()));
    if (!barrier_.unsent(r)) continue;
    Result sent =
        engine().send(p, kBarrierHandler, {}, std::as_bytes(std::span(&epoch, 1)), SendCallback(), PayloadCopy::kPool);
    if (sent == Result::kOk) barrier_.sent(r);
    else if (sent != Result::kWouldBlock)
      return absl::UnavailableError(
          absl::StrFormat("barrier %u: cannot reach %s (%s)", epoch, p.name(), to_string(sent)));
  }
  if (barrier_.arrivals(epoch) + 1 < static_cast<std::uint64_t>(engine().peers_.ranks())) return absl::OkStatus();
  barrier_.leave(epoch);
  *done = true;
  return absl::OkStatus();
}

absl::Status RankBarrier::timed_out(std::uint64_t epoch) const {
  return absl::DeadlineExceededError(absl::StrFormat("barrier %u: %u of the %d other ranks arrived before the deadline",
                                                     epoch, barrier_.arrivals(epoch), engine().peers_.ranks() - 1));
}

void RankBarrier::word(const Message& m) {
  std::uint64_t epoch = 0;
  if (state(m).peer >= static_cast<std::uint32_t>(engine().peers_.ranks()) ||
      state(m).payload.size() != sizeof(epoch)) {
    engine().c_.parse_errors->add();
    SLUICE_LOG_RATE_LIMITED(kWarn, "am", "%s sent a barrier word (%u bytes) it cannot send: dropped",
                            engine().peers_.at(state(m).peer).name(), state(m).payload.size());
    return;
  }
  std::memcpy(&epoch, state(m).payload.data(), sizeof(epoch));
  barrier_.arrived(epoch, static_cast<int>(state(m).peer));
}

}  // namespace sluice::detail
