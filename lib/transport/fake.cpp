// The fake transport: transport.h implemented by an in-process fabric (fake.h says how it
// behaves). Tests only; one recursive lock guards the fabric (callbacks re-post receives).
#include "transport/fake.h"
#include "transport/stream.h"

#include <sys/eventfd.h>
#include <ucs/type/status.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <vector>

#include <absl/strings/str_format.h>

namespace sluice::detail {
namespace {

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
  std::function<bool(const fake::Packet&)> match;
  fake::Action action;
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

FabricState& fabric() {
  static auto* f = new FabricState();  // never destroyed: workers may outlive static teardown
  return *f;
}

bool matches(Tag tag, Tag want, Tag mask) { return ((tag ^ want) & mask) == 0; }

void wake(FakeWorker* w) {
  std::uint64_t one = 1;
  (void)!::write(w->efd, &one, sizeof(one));
}

// The message is leaving the fabric (taken, dropped with its link): its send is done.
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

void arrive(FabricState& f, MsgPtr m) {
  auto it = f.workers.find(m->to);
  if (it == f.workers.end()) {
    finish_send(f, *m, absl::StatusCode::kUnavailable);
    return;
  }
  it->second->inbox.push_back(std::move(m));
  wake(it->second);
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
  fake::Action action = fake::Action::kHold;
  bool acted = false;
  fake::Packet packet{m->from, m->to, tag, m->bytes};
  for (Rule& r : f.rules) {
    // Only an immediate send can be refused: a posted one waits in UCX instead.
    if (r.action == fake::Action::kRefuse && op != nullptr) continue;
    if (r.left > 0 && r.match(packet)) {
      --r.left;
      action = r.action;
      acted = true;
      ++f.acted;
      break;
    }
  }
  if (acted && action == fake::Action::kRefuse) return {Post::kError, absl::StatusCode::kResourceExhausted};
  if (acted && action == fake::Action::kFailLink) {
    fail_between(f, m->from, m->to);
    return {Post::kError, absl::StatusCode::kUnavailable};
  }
  if (acted && action == fake::Action::kDrop) return {Post::kDone};
  bool large = len > fake::kEagerMax && op != nullptr;
  if (large) {
    m->send_op = op;
    op->request = m.get();
    f.pending.push_back(m.get());
  }
  if (acted && action == fake::Action::kDuplicate) {
    auto copy = std::make_unique<Msg>(*m);
    copy->send_op = nullptr;
    arrive(f, std::move(copy));
  }
  bool behind = std::any_of(f.held.begin(), f.held.end(),
                            [&](const MsgPtr& h) { return h->from == m->from && h->to == m->to && h->tag == m->tag; });
  if ((acted && action == fake::Action::kHold) || behind) f.held.push_back(std::move(m));
  else arrive(f, std::move(m));
  return {large ? Post::kPending : Post::kDone};
}

FakeWorker* worker_of(void* p) { return static_cast<FakeWorker*>(p); }

}  // namespace

// ---- controls ------------------------------------------------------------------------------

namespace fake {

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

}  // namespace fake

// ---- context and memory ----------------------------------------------------------------

absl::StatusOr<std::unique_ptr<TransportContext>> TransportContext::create(const Config&, const ProcessEnv&, bool) {
  return std::unique_ptr<TransportContext>(new TransportContext());
}

TransportContext::~TransportContext() = default;

std::string TransportContext::describe() const { return "# fake in-process transport (tests)\n"; }

absl::StatusOr<MemoryRegistration> MemoryRegistration::map(const TransportContext&, void* addr, std::size_t) {
  MemoryRegistration m;
  m.memh_ = addr;  // a token: the fake copies from and to plain memory
  return m;
}

MemoryRegistration::MemoryRegistration(MemoryRegistration&& o) noexcept : context_(o.context_), memh_(o.memh_) {
  o.memh_ = nullptr;
}

MemoryRegistration& MemoryRegistration::operator=(MemoryRegistration&& o) noexcept {
  context_ = o.context_;
  memh_ = o.memh_;
  o.memh_ = nullptr;
  return *this;
}

MemoryRegistration::~MemoryRegistration() = default;

// ---- endpoint --------------------------------------------------------------------------

Endpoint::Endpoint(Endpoint&& o) noexcept : ep_(o.ep_), worker_(o.worker_) { o.ep_ = nullptr; }

Endpoint& Endpoint::operator=(Endpoint&& o) noexcept {
  if (this != &o) {
    (void)start_close(true);
    ep_ = o.ep_;
    worker_ = o.worker_;
    o.ep_ = nullptr;
  }
  return *this;
}

Endpoint::~Endpoint() { (void)start_close(true); }

PostResult Endpoint::post_send(TransportOp* op, const void* buf, std::size_t len, Tag tag, void*) const {
  return send(static_cast<FakeEp*>(ep_), op, buf, len, tag);
}

PostResult Endpoint::send_now(const void* buf, std::size_t len, Tag tag) const {
  if (len > fake::kEagerMax) return {Post::kError, absl::StatusCode::kResourceExhausted};
  return send(static_cast<FakeEp*>(ep_), nullptr, buf, len, tag);
}

std::string Endpoint::transports() const { return ep_ != nullptr ? "fake" : ""; }

void* Endpoint::start_close(bool) {
  if (ep_ == nullptr) return nullptr;
  FabricState& f = fabric();
  std::lock_guard lock(f.mu);
  auto* ep = static_cast<FakeEp*>(ep_);
  if (FakeWorker* w = ep->local) {  // null once its worker is gone
    // What it still sends is cancelled here (its bytes, already copied, may still arrive).
    for (Msg* m : std::vector<Msg*>(f.pending))
      if (m->from == w->id && m->to == ep->remote) finish_send(f, *m, absl::StatusCode::kCancelled);
    std::erase(w->eps, ep);
    std::erase(w->errors, ep);
  }
  delete ep;
  ep_ = nullptr;
  return nullptr;
}

// ---- worker ----------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Worker>> Worker::create(const TransportContext&) {
  FabricState& f = fabric();
  std::lock_guard lock(f.mu);
  auto* w = new FakeWorker();
  w->id = f.next_id++;
  w->efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (w->efd < 0) {
    delete w;
    return absl::InternalError("eventfd failed");
  }
  f.workers[w->id] = w;
  std::unique_ptr<Worker> out(new Worker());
  out->worker_ = w;
  out->efd_ = w->efd;
  out->address_ = absl::StrFormat("fake:%d", w->id);
  return out;
}

Worker::~Worker() {
  FabricState& f = fabric();
  std::lock_guard lock(f.mu);
  FakeWorker* w = worker_of(worker_);
  // Its peers see their endpoints to it fail, as UCX reports a process that is gone.
  std::vector<int> others;
  for (auto& [id, other] : f.workers)
    if (id != w->id) others.push_back(id);
  for (int id : others) fail_between(f, w->id, id);
  // Nothing of it may be completed later: its ops die with it.
  for (Msg* m : std::vector<Msg*>(f.pending)) {
    if (m->from == w->id) {
      std::erase(f.pending, m);
      m->send_op = nullptr;
    }
  }
  for (FakeEp* ep : w->eps) {  // endpoints not yet closed are inert
    ep->local = nullptr;
    ep->failed = true;
  }
  f.workers.erase(w->id);
  ::close(w->efd);
  delete w;
}

absl::StatusOr<Endpoint> Worker::connect(std::string_view address, Endpoint::ErrorCallback on_error, void* arg) {
  int id = -1;
  auto [end, ec] =
      std::from_chars(address.data() + std::min<std::size_t>(5, address.size()), address.data() + address.size(), id);
  if (address.substr(0, 5) != "fake:" || ec != std::errc() || end != address.data() + address.size())
    return absl::InvalidArgumentError(absl::StrFormat("not a fake transport address: %s", address));
  FabricState& f = fabric();
  std::lock_guard lock(f.mu);
  auto* ep = new FakeEp{worker_of(worker_), id, on_error, arg};
  ep->local->eps.push_back(ep);
  if (f.workers.find(id) == f.workers.end()) {  // gone already: fails at the next progress
    ep->failed = true;
    ep->local->errors.push_back(ep);
  }
  Endpoint out;
  out.ep_ = ep;
  out.worker_ = worker_;
  return out;
}

PostResult Worker::post_recv(const Endpoint&, TransportOp* op, void* buf, std::size_t len, Tag tag, Tag mask, void*) {
  FabricState& f = fabric();
  std::lock_guard lock(f.mu);
  FakeWorker* w = worker_of(worker_);
  for (auto m = w->unexpected.begin(); m != w->unexpected.end(); ++m) {
    if (matches((*m)->tag, tag, mask)) {
      MsgPtr msg = std::move(*m);
      w->unexpected.erase(m);
      take(f, std::move(msg), op, buf, len);  // as UCX: completes inside the call
      return {Post::kPending};
    }
  }
  op->request = op;
  w->posted.push_back({op, buf, len, tag, mask});
  return {Post::kPending};
}

Worker::Unexpected Worker::take_unexpected(Tag tag, Tag mask) {
  FabricState& f = fabric();
  std::lock_guard lock(f.mu);
  FakeWorker* w = worker_of(worker_);
  for (auto m = w->unexpected.begin(); m != w->unexpected.end(); ++m) {
    if (matches((*m)->tag, tag, mask)) {
      Msg* msg = m->release();
      w->unexpected.erase(m);
      return {msg, msg->bytes.size(), msg->tag};
    }
  }
  return {};
}

PostResult Worker::post_recv_message(TransportOp* op, const Unexpected& u, void* buf, std::size_t len, void*) {
  FabricState& f = fabric();
  std::lock_guard lock(f.mu);
  take(f, MsgPtr(static_cast<Msg*>(u.message)), op, buf, len);
  return {Post::kPending};
}

void Worker::cancel(TransportOp* op) {
  FabricState& f = fabric();
  std::lock_guard lock(f.mu);
  FakeWorker* w = worker_of(worker_);
  for (auto r = w->posted.begin(); r != w->posted.end(); ++r) {
    if (r->op == op) {
      w->posted.erase(r);
      op->request = nullptr;
      op->on_complete(op, absl::StatusCode::kCancelled, 0, 0);  // as UCX: inside the call
      return;
    }
  }
}

bool Worker::has_unexpected(Tag tag, Tag mask) {
  FabricState& f = fabric();
  std::lock_guard lock(f.mu);
  FakeWorker* w = worker_of(worker_);
  return std::any_of(w->unexpected.begin(), w->unexpected.end(),
                     [&](const MsgPtr& m) { return matches(m->tag, tag, mask); });
}

bool Worker::progress() {
  FabricState& f = fabric();
  std::lock_guard lock(f.mu);
  FakeWorker* w = worker_of(worker_);
  bool any = false;
  while (!w->completions.empty()) {
    Completion c = w->completions.front();
    w->completions.pop_front();
    c.op->on_complete(c.op, c.code, 0, 0);
    any = true;
  }
  while (!w->errors.empty()) {
    FakeEp* ep = w->errors.front();
    w->errors.pop_front();
    ep->on_error(ep->arg, UCS_ERR_CONNECTION_RESET);
    any = true;
  }
  // Only what had arrived when this call began: a reply sent from a callback waits for the
  // next call, as a message does in UCX's FIFO.
  std::size_t n = w->inbox.size();
  for (std::size_t i = 0; i < n && !w->inbox.empty(); ++i) {
    MsgPtr m = std::move(w->inbox.front());
    w->inbox.pop_front();
    any = true;
    auto r = std::find_if(w->posted.begin(), w->posted.end(),
                          [&](const PostedRecv& p) { return matches(m->tag, p.tag, p.mask); });
    if (r == w->posted.end()) {
      w->unexpected.push_back(std::move(m));
      continue;
    }
    PostedRecv got = *r;
    w->posted.erase(r);
    take(f, std::move(m), got.op, got.buf, got.len);
  }
  return any;
}

bool Worker::arm() {
  FabricState& f = fabric();
  std::lock_guard lock(f.mu);
  FakeWorker* w = worker_of(worker_);
  std::uint64_t v;
  while (::read(w->efd, &v, sizeof(v)) > 0) {}
  return w->inbox.empty() && w->completions.empty() && w->errors.empty();
}

void Worker::signal() { wake(worker_of(worker_)); }

absl::Status Worker::wait_request(void* request, std::chrono::steady_clock::time_point) {
  (void)request;  // start_close never returns one
  return absl::OkStatus();
}

}  // namespace sluice::detail
