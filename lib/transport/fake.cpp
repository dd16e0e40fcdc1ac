// The fake transport: transport.h implemented by an in-process fabric (fake.h says how it
// behaves; fake_fabric.h holds its state). Tests only.
#include "transport/fake.h"
#include "transport/fake_fabric.h"
#include "transport/stream.h"

#include <sys/eventfd.h>
#include <ucs/type/status.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <vector>

#include <absl/strings/str_format.h>

namespace sluice::detail {

using fake::Completion;
using fake::fabric;
using fake::FabricState;
using fake::fail_between;
using fake::FakeEp;
using fake::FakeWorker;
using fake::finish_send;
using fake::matches;
using fake::Msg;
using fake::MsgPtr;
using fake::PostedRecv;
using fake::take;
using fake::wake;
using fake::worker_of;

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
  return fake::send(static_cast<FakeEp*>(ep_), op, buf, len, tag);
}

absl::StatusCode Endpoint::send_now(const void* buf, std::size_t len, Tag tag) const {
  if (len > fake::kEagerMax) return absl::StatusCode::kResourceExhausted;
  PostResult r = fake::send(static_cast<FakeEp*>(ep_), nullptr, buf, len, tag);
  if (r.kind == Post::kDone) return absl::StatusCode::kOk;
  return r.code != absl::StatusCode::kOk ? r.code : absl::StatusCode::kResourceExhausted;  // never pending here
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
  w->posted.push({op, buf, len, tag, mask});
  return {Post::kPending};
}

absl::StatusCode Worker::post_recv_exact(const Endpoint& from, TransportOp* op, void* buf, std::size_t len, Tag tag,
                                         void* memh) {
  return post_recv(from, op, buf, len, tag, kFullMask, memh).code;
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
  if (w->posted.cancel(op)) {
    op->request = nullptr;
    op->on_complete(op, absl::StatusCode::kCancelled, 0, 0);  // as UCX: inside the call
  }
}

bool Worker::has_unexpected(Tag tag, Tag mask) {
  FabricState& f = fabric();
  std::lock_guard lock(f.mu);
  FakeWorker* w = worker_of(worker_);
  return std::any_of(w->unexpected.begin(), w->unexpected.end(),
                     [&](const MsgPtr& m) { return matches(m->tag, tag, mask); });
}

// The fake fabric has no shared-memory FIFO to stall.
Worker::Fifo Worker::check_fifo(std::chrono::steady_clock::duration) { return Fifo::kNone; }
void Worker::fifo_stopped() {}
Worker::FifoProbe Worker::fifo_probe() const { return {}; }

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
    PostedRecv got{};
    if (!w->posted.take(m->tag, &got)) {
      w->unexpected.push_back(std::move(m));
      continue;
    }
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

void Worker::drain_wakeups() {}  // the fake's wake-ups are the event fd itself (arm reads it)

void Worker::signal() { wake(worker_of(worker_)); }

absl::Status Worker::wait_request(void* request, std::chrono::steady_clock::time_point) {
  (void)request;  // start_close never returns one
  return absl::OkStatus();
}

void* Endpoint::start_flush() { return nullptr; }  // the fake has no wire-up to wait for

void* Worker::close_failed(Endpoint& ep, std::chrono::steady_clock::duration) { return ep.start_close(true); }

}  // namespace sluice::detail
