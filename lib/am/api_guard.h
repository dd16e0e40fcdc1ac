// The API's guard (internal): which thread drives the engine, and the misuse the public API
// refuses. One thread drives an engine (binds it with its first progress(), run_until() or
// wait(); lets go with release_thread()); a call from another thread is refused, counted and
// logged once per method. An invalid argument is refused with kInvalidArgument, counted and
// logged, rate-limited per call site.
#pragma once

#include <atomic>
#include <cassert>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <sluice/engine.h>

#include "core/log.h"

namespace sluice::detail {

class EngineCore;

class ApiGuard {
 public:
  explicit ApiGuard([[maybe_unused]] EngineCore& e) { assert(&engine() == &e); }
  ApiGuard(const ApiGuard&) = delete;
  ApiGuard& operator=(const ApiGuard&) = delete;

  // Whether the calling thread may call `what` (a public method's name): the thread driving
  // the engine, or any thread before one does. Otherwise counted (api.wrong_thread), logged
  // once per engine naming both threads, and false: the caller returns kInvalidArgument.
  bool engine_thread(const char* what) {
    const void* d = driver_.load(std::memory_order_relaxed);
    if (d == thread_pointer() || d == nullptr) [[likely]]
      return true;
    wrong_thread(what);
    return false;
  }
  // Whether the calling thread is the one bound (`order`: acquire where what the previous
  // driver did must be seen).
  bool bound_here(std::memory_order order = std::memory_order_relaxed) const {
    return driver_.load(order) == thread_pointer();
  }
  // Binds the calling thread when nothing drives the engine; false (after wrong_thread()) when
  // another thread does. take_over() binds it whatever drove the engine (its destructor).
  bool bind(const char* what);
  bool take_over(const char* what) {
    driver_.store(nullptr, std::memory_order_relaxed);
    return bind(what);
  }
  // Engine::release_thread(): the next thread to drive the engine binds it.
  void release();
  std::uint64_t wrong_thread_calls() const { return wrong_thread_calls_.load(std::memory_order_relaxed); }

  // kInvalidArgument, counted (api.invalid_argument) and logged with `why`, rate-limited per
  // call site.
  Result invalid(const std::string& why, const char* file = __builtin_FILE(), unsigned line = __builtin_LINE());
  // Those of a send or reply from an empty Slot or beyond its size, and of an OK status given
  // to reply_error().
  Result bad_slot(const char* what, const Slot& slot, std::size_t length);
  Result bad_status() { return invalid("Message::reply_error: the status is OK (use reply() for an answer)"); }

 private:
  void wrong_thread(const char* what);
  // The calling thread, by its thread pointer (comparing that is one instruction where
  // std::this_thread::get_id() is a call into libc).
  static const void* thread_pointer() {
#if defined(__has_builtin) && __has_builtin(__builtin_thread_pointer)
    return __builtin_thread_pointer();
#else
    static thread_local const char marker = 0;  // distinct per thread, like the thread pointer
    return &marker;
#endif
  }
  EngineCore& engine() const;  // the engine holding this (EngineCore::of)

  // The thread driving the engine: nullptr until the first progress(), run_until() or wait()
  // binds the calling thread, and again after release().
  std::atomic<const void*> driver_{nullptr};
  std::atomic<int> driver_tid_{0};  // its kernel thread id, for messages
  std::atomic<std::uint64_t> wrong_thread_calls_{0};
  std::mutex wrong_thread_mu_;
  std::vector<std::string> wrong_thread_logged_;  // the methods refused so far (each logged once)
  std::map<std::pair<const char*, unsigned>, RateLimit> invalid_limits_;  // invalid()'s, by call site
};

}  // namespace sluice::detail
