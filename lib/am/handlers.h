// The handler table (internal): registrations, the handler calls (invoke.h, inlined into the
// receive and request paths), and plain messages that arrive before their handler is
// registered: kept (am/unclaimed.h), delivered once it is, dropped only when the engine closes.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <vector>

#include <sluice/engine.h>

#include "am/unclaimed.h"

namespace sluice::detail {

class EngineCore;

struct HandlerEntry {
  Handler fn;
  HandlerOptions options;
};

class Handlers {
 public:
  // What a handler call did: kNoHandler when none is registered; kThrew (counted, logged, the
  // exception's message kept for take_error()) when it threw. Handlers never throw past here.
  enum class Invoke { kDone, kNoHandler, kThrew };

  explicit Handlers([[maybe_unused]] EngineCore& e) : table_(kMaxHandlers) { assert(&engine() == &e); }
  Handlers(const Handlers&) = delete;
  Handlers& operator=(const Handlers&) = delete;

  absl::Status add(HandlerId id, Handler fn, HandlerOptions options);
  absl::Status remove(HandlerId id);
  // The options registered for `id` (defaults when none is), or nullptr beyond the table.
  const HandlerOptions* options(HandlerId id) const { return id < kMaxHandlers ? &table_[id].options : nullptr; }

  // Runs m's handler (invoke.h, inline: every handler call passes here).
  Invoke invoke(Message& m);
  // invoke(); a message for a handler not registered is kept until it is.
  void dispatch(Message& m);
  // The last handler exception's message (Invoke::kThrew), taken.
  std::string take_error() { return std::move(error_); }
  // A sink's buffer whose payload will not reach its handler goes back (HandlerOptions).
  void give_back_sink(Message& m);

  // Messages kept for handlers not registered: all of them, and those from one peer.
  std::size_t kept() const { return unclaimed_.size(); }
  std::size_t kept_from(std::uint32_t peer) const { return unclaimed_.from(peer); }
  // The close: messages whose handler never came are dropped, counted and logged.
  void drop_unclaimed();

 private:
  // A registration waiting for claim() (messages wait for it), or nullptr.
  HandlerEntry* claiming(HandlerId id);
  // Installs a waiting registration and delivers what waited for it, oldest first.
  void claim(HandlerId id);
  // A plain message whose handler is not registered: kept, counted, logged.
  void no_handler(Message& m);
  void threw(const Message& m, const char* what);

  EngineCore& engine() const;  // the engine holding this (EngineCore::of)
  std::vector<HandlerEntry> table_;
  Unclaimed unclaimed_;                                       // plain messages whose handler is not registered yet
  std::vector<std::pair<HandlerId, HandlerEntry>> claiming_;  // registered, installed by claim()
  std::string error_;
};

}  // namespace sluice::detail
