// The API's guard: the thread that drives the engine, and refused calls.

#include <unistd.h>

#include <algorithm>
#include <thread>

#include <absl/strings/str_format.h>

#include "am/api_guard.h"

#include "am/engine_core.h"

namespace sluice::detail {

bool ApiGuard::bind(const char* what) {
  // The thread that drives the engine owns its pools' free lists (slots released elsewhere
  // come back through the pools' lock-free return path).
  const void* me = thread_pointer();
  const void* expected = nullptr;
  if (driver_.compare_exchange_strong(expected, me, std::memory_order_acq_rel)) {
    driver_tid_.store(static_cast<int>(gettid()), std::memory_order_relaxed);
    engine().send_pool_->set_owner(std::this_thread::get_id());
    engine().recv_pool_->set_owner(std::this_thread::get_id());
    return true;
  }
  if (expected == me) return true;
  wrong_thread(what);
  return false;
}

void ApiGuard::release() {
  if (!engine_thread("Engine::release_thread")) return;
  driver_.store(nullptr, std::memory_order_release);
}

Result ApiGuard::invalid(const std::string& why, const char* file, unsigned line) {
  engine().c_.invalid_argument->add();
  if (log_enabled(LogLevel::kWarn)) [[unlikely]] {
    auto [it, _] = invalid_limits_.try_emplace({file, line});
    std::uint64_t suppressed = 0;
    if (it->second.allow(&suppressed))
      log_write(LogLevel::kWarn, "api",
                suppressed == 0 ? why : absl::StrFormat("%s (%u similar lines suppressed)", why, suppressed));
  }
  return Result::kInvalidArgument;
}

void ApiGuard::wrong_thread(const char* what) {
  wrong_thread_calls_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard lock(wrong_thread_mu_);
    if (std::find(wrong_thread_logged_.begin(), wrong_thread_logged_.end(), what) != wrong_thread_logged_.end()) return;
    wrong_thread_logged_.emplace_back(what);
  }
  SLUICE_LOG(kError, "am",
             "engine %d: %s called on thread %d while thread %d drives the engine: refused (logged once per "
             "method; counted in api.wrong_thread). One thread drives an engine: "
             "hand it work with Engine::post(), or hand the engine over with Engine::release_thread() "
             "on the driving thread",
             engine().engine_id_, what, static_cast<int>(gettid()), driver_tid_.load(std::memory_order_relaxed));
}

Result ApiGuard::bad_slot(const char* what, const Slot& slot, std::size_t length) {
  return invalid(
      absl::StrFormat("%s: %s", what,
                      !slot ? std::string("the Slot is empty")
                            : absl::StrFormat("length %u is beyond the slot's %u bytes", length, slot_size(slot))));
}

}  // namespace sluice::detail
