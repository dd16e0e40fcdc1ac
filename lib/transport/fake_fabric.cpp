// The fake transport's fabric: messages between workers, the rules that act on them, and
// fake.h's controls (fake_fabric.h).
#include "transport/fake_fabric.h"

#include <unistd.h>

#include <algorithm>

namespace sluice::detail::fake {
namespace {

void arrive(FabricState& f, MsgPtr m) {
  auto it = f.workers.find(m->to);
  if (it == f.workers.end()) {
    finish_send(f, *m, absl::StatusCode::kUnavailable);
    return;
  }
  it->second->inbox.push_back(std::move(m));
  wake(it->second);
}

}  // namespace

FabricState& fabric() {
  static auto* f = new FabricState();
  return *f;
}

void wake(FakeWorker* w) {
  std::uint64_t one = 1;
  (void)!::write(w->efd, &one, sizeof(one));
}

void finish_send(FabricState& f, Msg& m, absl::StatusCode code) {
  if (m.send_op == nullptr) return;
  std::erase(f.pending, &m);
  auto it = f.workers.find(m.from);
  if (it != f.workers.end()) {
    it->second->completions.push_back({m.send_op, code});
    wake(it->second);
  }
  m.send_op->request = nullptr;
  m.send_op = nullptr;
}

// Copies a message into a receive and completes it (the callback runs now).
void take(FabricState& f, MsgPtr m, TransportOp* op, void* buf, std::size_t len) {
  absl::StatusCode code = absl::StatusCode::kOk;
  std::size_t n = m->bytes.size();
  if (n > len) {
    code = absl::StatusCode::kOutOfRange;  // UCX: message truncated
    n = 0;
  } else if (n != 0) {
    std::memcpy(buf, m->bytes.data(), n);
  }
  Tag tag = m->tag;
  finish_send(f, *m, absl::StatusCode::kOk);
  op->request = nullptr;
  op->on_complete(op, code, n, code == absl::StatusCode::kOk ? tag : 0);
}

void fail_between(FabricState& f, int a, int b) {
  auto on_link = [&](const Msg& m) { return (m.from == a && m.to == b) || (m.from == b && m.to == a); };
  for (int side : {a, b}) {
    auto it = f.workers.find(side);
    if (it == f.workers.end()) continue;
    FakeWorker* w = it->second;
    for (FakeEp* ep : w->eps) {
      if (ep->remote == (side == a ? b : a) && !ep->failed) {
        ep->failed = true;
        w->errors.push_back(ep);
        wake(w);
      }
    }
    // Large payloads that had not been taken never arrive.
    for (auto* q : {&w->inbox, &w->unexpected}) {
      for (auto m = q->begin(); m != q->end();) {
        if (on_link(**m) && (*m)->send_op != nullptr) {
          finish_send(f, **m, absl::StatusCode::kUnavailable);
          m = q->erase(m);
        } else {
          ++m;
        }
      }
    }
  }
  for (auto m = f.held.begin(); m != f.held.end();) {
    if (on_link(**m)) {
      finish_send(f, **m, absl::StatusCode::kUnavailable);
      m = f.held.erase(m);
    } else {
      ++m;
    }
  }
}

// A send on `ep`: the rules act, then the message arrives (or is held behind one of its tag).
PostResult send(FakeEp* ep, TransportOp* op, const void* buf, std::size_t len, Tag tag) {
  FabricState& f = fabric();
  std::lock_guard lock(f.mu);
  if (ep->failed) return {Post::kError, absl::StatusCode::kUnavailable};
  auto m = std::make_unique<Msg>();
  m->from = ep->local->id;
  m->to = ep->remote;
  m->tag = tag;
  m->bytes.assign(static_cast<const std::byte*>(buf), static_cast<const std::byte*>(buf) + len);
  ++f.sent;
  Action action = Action::kHold;
  bool acted = false;
  Packet packet{m->from, m->to, tag, m->bytes};
  for (Rule& r : f.rules) {
    // Only an immediate send can be refused: a posted one waits in UCX instead.
    if (r.action == Action::kRefuse && op != nullptr) continue;
    if (r.left > 0 && r.match(packet)) {
      --r.left;
      action = r.action;
      acted = true;
      ++f.acted;
      break;
    }
  }
  if (acted && action == Action::kRefuse) return {Post::kError, absl::StatusCode::kResourceExhausted};
  if (acted && action == Action::kFailLink) {
    fail_between(f, m->from, m->to);
    return {Post::kError, absl::StatusCode::kUnavailable};
  }
  if (acted && action == Action::kDrop) return {Post::kDone};
  bool large = len > kEagerMax && op != nullptr;
  if (large) {
    m->send_op = op;
    op->request = m.get();
    f.pending.push_back(m.get());
  }
  if (acted && action == Action::kDuplicate) {
    auto copy = std::make_unique<Msg>(*m);
    copy->send_op = nullptr;
    arrive(f, std::move(copy));
  }
  bool behind = std::any_of(f.held.begin(), f.held.end(),
                            [&](const MsgPtr& h) { return h->from == m->from && h->to == m->to && h->tag == m->tag; });
  if ((acted && action == Action::kHold) || behind) f.held.push_back(std::move(m));
  else arrive(f, std::move(m));
  return {large ? Post::kPending : Post::kDone};
}

// ---- controls ------------------------------------------------------------------------------

void Fabric::on_send(std::function<bool(const Packet&)> match, Action action, int count) {
  FabricState& f = fabric();
  std::lock_guard lock(f.mu);
  f.rules.push_back({std::move(match), action, count});
}

std::size_t Fabric::release_held() {
  FabricState& f = fabric();
  std::lock_guard lock(f.mu);
  std::size_t n = f.held.size();
  while (!f.held.empty()) {
    MsgPtr m = std::move(f.held.front());
    f.held.pop_front();
    arrive(f, std::move(m));
  }
  return n;
}

std::size_t Fabric::held() {
  std::lock_guard lock(fabric().mu);
  return fabric().held.size();
}

std::uint64_t Fabric::sent() {
  std::lock_guard lock(fabric().mu);
  return fabric().sent;
}

std::uint64_t Fabric::acted() {
  std::lock_guard lock(fabric().mu);
  return fabric().acted;
}

void Fabric::reset() {
  release_held();
  FabricState& f = fabric();
  std::lock_guard lock(f.mu);
  f.rules.clear();
  f.sent = f.acted = 0;
}

}  // namespace sluice::detail::fake
