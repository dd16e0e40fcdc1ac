// The fake transport's controls (internal, tests only): an in-process fabric behind the
// declarations of transport.h, linked instead of UCX into libsluice-fake.
//
// Every worker of the process is on one fabric. A send copies its bytes into a message that is
// put in the destination worker's inbox; the destination's progress() matches it against its
// posted receives (in posting order, tag and mask as UCX matches) or keeps it as unexpected
// for probing. Sends of at most kEagerMax bytes complete at once; larger ones complete when
// the receiver has taken them, as a rendezvous does. Deterministic: nothing moves except
// inside a send or a progress call.
//
// Rules act on messages as they are sent: drop, hold (until release_held: a delay, and a
// reordering against what passes meanwhile), duplicate, refuse an immediate send (send_now:
// the transport says "not now", as a full queue does; a posted send would wait), or fail the link between sender and
// receiver (both sides' endpoints report an error at their next progress; the message is not delivered; pending sends
// on the link complete with an error). A held message holds back the later messages of its link with the same tag, so
// messages reorder only between tags.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>

#include "transport/transport.h"

namespace sluice::detail::fake {

inline constexpr std::size_t kEagerMax = 8192;

// A message in flight, as a rule sees it.
struct Packet {
  int from = 0;  // worker ids, in creation order
  int to = 0;
  Tag tag = 0;
  std::span<const std::byte> bytes;
};

enum class Action { kDrop, kHold, kDuplicate, kRefuse, kFailLink };

// The fabric's controls. Rules and counts are process-wide; reset() clears them.
class Fabric {
 public:
  // The next `count` messages for which `match` is true get `action` (rules are tried in the
  // order they were added; the first that matches acts).
  static void on_send(std::function<bool(const Packet&)> match, Action action, int count = 1);
  // Delivers the held messages in the order they were held. Returns how many.
  static std::size_t release_held();
  static std::size_t held();
  // Messages sent and messages a rule acted on, since the last reset().
  static std::uint64_t sent();
  static std::uint64_t acted();
  // Forgets rules and counts, and delivers what is held.
  static void reset();
};

}  // namespace sluice::detail::fake
