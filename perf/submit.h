// sluice-perf's am_submit, the sending side: messages handed to the engine by threads that do
// not drive it (Engine::submit), against the engine thread sending the same messages itself.
#pragma once

#include <functional>

#include <sluice/sluice.h>

#include "options.h"
#include "report.h"
#include "rows.h"

namespace sluice::perf {

// Sends c.warmup, then c.iters timed, c.size-byte copies to `handler` on `peer`: from
// o.producers threads through e.submit() while this thread (e's) drives it with run_until(),
// or with c.mode kEngineAlone from this thread itself (send_copy, progressing while the send
// queue is full). The timed part ends when `received()` says the receiver has them all. Rate
// (messages/s) and bandwidth; exits 1 when a send fails or nothing moves for 300 s.
Figures submit_rate(Engine& e, Peer& peer, HandlerId handler, const Cmd& c, const Options& o,
                    const std::function<bool()>& received);

}  // namespace sluice::perf
