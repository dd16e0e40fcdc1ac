// The fake transport's fabric (internal to lib/transport, tests only): the workers, endpoints and
// messages in flight behind fake.cpp's transport.h, and the rules fake.h's controls add. One
// recursive lock guards it all (callbacks re-post receives).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/fake.h"

namespace sluice::detail::fake {

struct FakeWorker;

struct FakeEp {
  FakeWorker* local;
  int remote;
  Endpoint::ErrorCallback on_error;
  void* arg;
  bool failed = false;
};

struct Msg {
  int from, to;
  Tag tag;
  std::vector<std::byte> bytes;
  TransportOp* send_op = nullptr;  // a send of more than kEagerMax bytes, done when taken
};
using MsgPtr = std::unique_ptr<Msg>;

struct PostedRecv {
  TransportOp* op;
  void* buf;
  std::size_t len;
  Tag tag, mask;
};

struct Completion {
  TransportOp* op;
  absl::StatusCode code;
};

struct FakeWorker {
  int id = 0;
  int efd = -1;
  std::deque<MsgPtr> inbox;       // arrived, not yet seen by progress()
  std::deque<MsgPtr> unexpected;  // seen, no receive took it
  std::list<PostedRecv> posted;
  std::deque<Completion> completions;  // sends, reported by progress()
  std::deque<FakeEp*> errors;          // endpoints whose failure progress() reports
  std::vector<FakeEp*> eps;
};

struct Rule {
  std::function<bool(const Packet&)> match;
  Action action;
  int left;
};

struct FabricState {
  std::recursive_mutex mu;
  std::map<int, FakeWorker*> workers;
  int next_id = 0;
  std::vector<Rule> rules;
  std::deque<MsgPtr> held;
  std::vector<Msg*> pending;  // messages whose send_op waits for the receiver
  std::uint64_t sent = 0, acted = 0;
};

// The fabric of the process (never destroyed: workers may outlive static teardown).
FabricState& fabric();

inline bool matches(Tag tag, Tag want, Tag mask) { return ((tag ^ want) & mask) == 0; }
inline FakeWorker* worker_of(void* p) { return static_cast<FakeWorker*>(p); }

// Wakes the worker's event fd.
void wake(FakeWorker* w);
// The message is leaving the fabric (taken, dropped with its link): its send is done.
void finish_send(FabricState& f, Msg& m, absl::StatusCode code);
// Copies a message into a receive and completes it (the callback runs now).
void take(FabricState& f, MsgPtr m, TransportOp* op, void* buf, std::size_t len);
// Fails the link between workers a and b: both sides' endpoints, and what is in flight on it.
void fail_between(FabricState& f, int a, int b);
// A send on `ep`: the rules act, then the message arrives (or is held behind one of its tag).
PostResult send(FakeEp* ep, TransportOp* op, const void* buf, std::size_t len, Tag tag);

}  // namespace sluice::detail::fake
