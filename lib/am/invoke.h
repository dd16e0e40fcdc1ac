// Handler invocation (internal), in a header: inlined into the receive path and the request
// path (48 fewer instructions per received message with accept()'s body; the time that saved was
// within the measurement's noise).
#pragma once

#include <exception>

#include "am/engine_core.h"
#include "core/probe.h"

namespace sluice::detail {

[[gnu::always_inline]] inline EngineCore::Invoke EngineCore::invoke_handler(Message& m) {
  if (m.s_.handler >= kMaxHandlers || !handlers_[m.s_.handler].fn) [[unlikely]] {
    if (m.s_.handler != kBarrierHandler) c_.unknown_handler->add();
    return Invoke::kNoHandler;
  }
  m.s_.sink_landing = false;  // the handler has it now
  try {
    probe::stamp(probe::kHandler);
    handlers_[m.s_.handler].fn(m);
    return Invoke::kDone;
  } catch (const std::exception& e) {
    handler_threw(m, e.what());
  } catch (...) {
    handler_threw(m, "a non-standard exception");
  }
  return Invoke::kThrew;
}

[[gnu::always_inline]] inline void EngineCore::dispatch(Message& m) {
  if (invoke_handler(m) == Invoke::kNoHandler) [[unlikely]]
    no_handler(m);
}

}  // namespace sluice::detail
