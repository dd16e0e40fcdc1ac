// The fake transport's fabric (internal to lib/transport, tests only): the workers, endpoints and
// messages in flight behind fake.cpp's transport.h, and the rules fake.h's controls add. One
// recursive lock guards it all (callbacks re-post receives).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
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

inline bool matches(Tag tag, Tag want, Tag mask) { return ((tag ^ want) & mask) == 0; }

// Posted receives as UCX keeps them: those with a full mask hashed by their tag, the others in
// a list, each with its posting order; a message takes the earliest one that matches. (A list
// alone made every arrival scan every receive: 20,000 of them with 10,000 peers.)
class PostedQueue {
 public:
  void push(const PostedRecv& r) {
    Entry e{r, next_++};
    if (r.mask == ~Tag{0}) exact_[r.tag].push_back(e);
    else wild_.push_back(e);
  }
  // The earliest receive that `tag` matches, taken out; false when none does.
  bool take(Tag tag, PostedRecv* out) {
    auto bucket = exact_.find(tag);
    auto wild =
        std::find_if(wild_.begin(), wild_.end(), [&](const Entry& e) { return matches(tag, e.r.tag, e.r.mask); });
    bool exact = bucket != exact_.end() && (wild == wild_.end() || bucket->second.front().seq < wild->seq);
    if (exact) {
      *out = bucket->second.front().r;
      bucket->second.pop_front();
      if (bucket->second.empty()) exact_.erase(bucket);
      return true;
    }
    if (wild == wild_.end()) return false;
    *out = wild->r;
    wild_.erase(wild);
    return true;
  }
  // The receive of `op`, taken out; false when it is not posted.
  bool cancel(TransportOp* op) {
    auto is = [&](const Entry& e) { return e.r.op == op; };
    if (auto it = std::find_if(wild_.begin(), wild_.end(), is); it != wild_.end()) {
      wild_.erase(it);
      return true;
    }
    for (auto b = exact_.begin(); b != exact_.end(); ++b) {
      if (auto it = std::find_if(b->second.begin(), b->second.end(), is); it != b->second.end()) {
        b->second.erase(it);
        if (b->second.empty()) exact_.erase(b);
        return true;
      }
    }
    return false;
  }

 private:
  struct Entry {
    PostedRecv r;
    std::uint64_t seq;
  };
  std::unordered_map<Tag, std::deque<Entry>> exact_;
  std::list<Entry> wild_;
  std::uint64_t next_ = 0;
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
  PostedQueue posted;
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
