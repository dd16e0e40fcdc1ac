// Messages for a handler not registered yet (internal). MPI keeps a message no receive is posted
// for; Sluice keeps a plain message whose handler is not registered, in arrival order, until
// that handler is registered (EngineCore::claim delivers them) or the engine closes. Memory
// stays bounded: a kept eager message holds its sender's credit, so a sender can have no more
// kept than the credits we granted it; a rendezvous one holds receive-pool memory, within the
// pool's budget. Requests are not kept: a call to a method not registered is answered
// Unimplemented, an error its caller sees.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include <sluice/message.h>

namespace sluice::detail {

class Unclaimed {
 public:
  struct Kept {
    HandlerId handler;
    std::uint32_t peer;
    Message message;
  };

  // `m` must own its bytes (no longer borrow a receive buffer).
  void keep(HandlerId handler, std::uint32_t peer, Message&& m) { kept_.push_back({handler, peer, std::move(m)}); }
  bool empty() const { return kept_.empty(); }
  std::size_t size() const { return kept_.size(); }
  bool waits_for(HandlerId handler) const {
    for (const Kept& k : kept_)
      if (k.handler == handler) return true;
    return false;
  }
  std::size_t from(std::uint32_t peer) const {
    std::size_t n = 0;
    for (const Kept& k : kept_) n += k.peer == peer ? 1 : 0;
    return n;
  }
  // Takes handler's messages out, oldest first.
  std::vector<Kept> take(HandlerId handler) {
    std::vector<Kept> out;
    std::deque<Kept> rest;
    for (Kept& k : kept_) {
      if (k.handler == handler) out.push_back(std::move(k));
      else rest.push_back(std::move(k));
    }
    kept_.swap(rest);
    return out;
  }
  std::deque<Kept> take_all() { return std::exchange(kept_, {}); }

 private:
  std::deque<Kept> kept_;
};

}  // namespace sluice::detail
