// Handler invocation (internal), in a header: inlined into the receive path and the request
// path (48 fewer instructions per received message with accept()'s body; the time that saved was
// within the measurement's noise).
#pragma once

#include <exception>

#include "am/engine_core.h"
#include "core/probe.h"

namespace sluice::detail {

[[gnu::always_inline]] inline Handlers::Invoke Handlers::invoke(Message& m) {
  if (state(m).handler >= kMaxHandlers || !table_[state(m).handler].fn) [[unlikely]] {
    if (state(m).handler != kBarrierHandler) engine().c_.unknown_handler->add();
    return Invoke::kNoHandler;
  }
  state(m).sink_landing = false;  // the handler has it now
  try {
    probe::stamp(probe::kHandler);
    table_[state(m).handler].fn(m);
    return Invoke::kDone;
  } catch (const std::exception& e) {
    threw(m, e.what());
  } catch (...) {
    threw(m, "a non-standard exception");
  }
  return Invoke::kThrew;
}

[[gnu::always_inline]] inline void Handlers::dispatch(Message& m) {
  if (invoke(m) == Invoke::kNoHandler) [[unlikely]]
    no_handler(m);
}

}  // namespace sluice::detail
