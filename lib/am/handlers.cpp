// The handler table, and plain messages that arrive before their handler is registered: kept
// (am/unclaimed.h), delivered once it is, dropped (counted, logged) only when the engine closes.

#include <exception>

#include <absl/strings/str_format.h>

#include "am/handlers.h"

#include "am/engine_core.h"
#include "am/invoke.h"
#include "core/log.h"

namespace sluice::detail {

absl::Status Handlers::add(HandlerId id, Handler fn, HandlerOptions options) {
  if (id >= kMaxHandlers) {
    return absl::InvalidArgumentError(absl::StrFormat("handler id %d is not below %d", id, kMaxHandlers));
  }
  if (!fn) return absl::InvalidArgumentError("empty handler function");
  if (table_[id].fn || claiming(id) != nullptr)
    return absl::AlreadyExistsError(absl::StrFormat("handler %d is already registered", id));
  if (!unclaimed_.waits_for(id)) {
    table_[id] = {std::move(fn), std::move(options)};
    return absl::OkStatus();
  }
  // Messages wait for it: it is installed from the next progress(), which delivers them first.
  // Until then, more of them join the kept ones, so they all arrive in order.
  claiming_.emplace_back(id, HandlerEntry{std::move(fn), std::move(options)});
  engine().post([this, id] { claim(id); });
  return absl::OkStatus();
}

absl::Status Handlers::remove(HandlerId id) {
  if (HandlerEntry* waiting = claiming(id)) {
    waiting->fn = {};  // claim() finds it empty and installs nothing
    return absl::OkStatus();
  }
  if (id >= kMaxHandlers || !table_[id].fn) {
    return absl::NotFoundError(absl::StrFormat("no handler %d is registered", id));
  }
  table_[id] = {};
  return absl::OkStatus();
}

HandlerEntry* Handlers::claiming(HandlerId id) {
  for (auto& [waiting, entry] : claiming_)
    if (waiting == id && entry.fn) return &entry;
  return nullptr;
}

void Handlers::claim(HandlerId id) {
  auto it = std::find_if(claiming_.begin(), claiming_.end(), [&](const auto& c) { return c.first == id; });
  if (it == claiming_.end()) return;
  HandlerEntry entry = std::move(it->second);
  claiming_.erase(it);
  if (!entry.fn || engine().shutting_down_) return;  // unregistered meanwhile; or closing: drop_unclaimed()
  table_[id] = std::move(entry);
  std::vector<Unclaimed::Kept> kept = unclaimed_.take(id);
  SLUICE_LOG(kInfo, "am", "handler %d registered: delivering the %u message(s) that waited for it", id, kept.size());
  for (Unclaimed::Kept& k : kept) {
    Message& m = k.message;
    if (!table_[id].fn) {  // a handler unregistered it: the rest wait again
      unclaimed_.keep(id, k.peer, std::move(m));
      continue;
    }
    if (invoke(m) != Invoke::kNoHandler && state(m).anchor != nullptr) engine().delivery_.release(m);
  }
}

void Handlers::no_handler(Message& m) {
  PeerData& p = engine().peers_.at(state(m).peer);
  HandlerId h = state(m).handler;
  if (h == kBarrierHandler) {
    engine().barrier_.word(m);
    return;
  }
  if (h >= kMaxHandlers) {  // no handler can ever take it
    SLUICE_LOG_RATE_LIMITED(kWarn, "am", "%s sent to handler %d, beyond the highest id %d: dropped", p.name(), h,
                            kMaxHandlers - 1);
    return;
  }
  if (state(m).borrowed) engine().delivery_.own_bytes(m);  // the receive buffer is re-posted after this returns
  SLUICE_LOG_RATE_LIMITED(kWarn, "am",
                          "%s sent to handler %d, which is not registered: kept until it is (%u message(s) kept; "
                          "each holds one of the sender's credits; am.unclaimed)",
                          p.name(), h, unclaimed_.size() + 1);
  unclaimed_.keep(h, p.id(), std::move(m));
}

void Handlers::drop_unclaimed() {
  std::deque<Unclaimed::Kept> kept = unclaimed_.take_all();
  if (kept.empty()) return;
  engine().c_.unclaimed_dropped->add(kept.size());
  std::string ids;
  for (const Unclaimed::Kept& k : kept)
    if (ids.find(absl::StrFormat(" %d,", k.handler)) == std::string::npos)
      absl::StrAppendFormat(&ids, " %d,", k.handler);
  ids.pop_back();
  SLUICE_LOG(kWarn, "am", "engine %d closed with %u message(s) for handlers never registered (%s): dropped",
             engine().engine_id_, kept.size(), ids.substr(1));
}

void Handlers::threw(const Message& m, const char* what) {
  error_ = what;
  engine().c_.handler_errors->add();
  SLUICE_LOG_RATE_LIMITED(kError, "am", "handler %d threw: %s", state(m).handler, error_);
}

void Handlers::give_back_sink(Message& m) {
  state(m).sink_landing = false;
  SinkRelease* give = state(m).handler < kMaxHandlers ? &table_[state(m).handler].options.sink_release : nullptr;
  if (give == nullptr || !*give) {
    SLUICE_LOG_RATE_LIMITED(kWarn, "am",
                            "handler %d's sink buffer of %u bytes was not delivered and there is no "
                            "sink_release to give it back to",
                            state(m).handler, state(m).payload.size());
    return;
  }
  engine().c_.sink_returned->add();
  try {
    (*give)(m, state(m).payload);
  } catch (const std::exception& e) {
    threw(m, e.what());
  } catch (...) {
    threw(m, "a non-standard exception");
  }
}

}  // namespace sluice::detail
