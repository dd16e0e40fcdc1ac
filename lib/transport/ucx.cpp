#include "transport/ucx.h"
#include "transport/stream.h"
#include "transport/transport.h"
#include "transport/ucx_address.h"

#include "core/probe.h"

#include <netinet/in.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include <absl/strings/str_format.h>

#include "core/log.h"
#include "transport/ucx_fifo.h"

namespace sluice::detail {
namespace {

ucp_context_h ctx_of(void* p) { return static_cast<ucp_context_h>(p); }
ucp_worker_h worker_of(void* p) { return static_cast<ucp_worker_h>(p); }
ucp_ep_h ep_of(void* p) { return static_cast<ucp_ep_h>(p); }

// The error callback and its argument, kept alive with the endpoint.
struct ErrorHandler {
  Endpoint::ErrorCallback fn;
  void* arg;
};

void ep_error_trampoline(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* h = static_cast<ErrorHandler*>(arg);
  h->fn(h->arg, static_cast<int>(status));
}

// UCX's own name for a failed send or receive (the engine sees only its status code); a
// cancelled one is the engine's doing and goes unsaid.
[[gnu::noinline, gnu::cold]] void log_failed(const char* what, ucs_status_t status) {
  if (status == UCS_ERR_CANCELED) return;
  SLUICE_LOG_RATE_LIMITED(kWarn, "transport", "a %s failed in UCX: %s", what, ucs_status_string(status));
}

void send_trampoline(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<TransportOp*>(user_data);
  op->request = nullptr;
  ucp_request_free(request);
  if (status != UCS_OK) [[unlikely]]
    log_failed("send", status);
  op->on_complete(op, ucx_status_code(status), 0, 0);
}

// A completed receive whose request is the op's own memory (Worker::post_recv_exact): handed
// on, nothing to give back. A failed one has UCX's reason logged.
void own_recv_trampoline(void* /*request*/, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data) {
  probe::stamp(probe::kRxCallback);
  auto* op = static_cast<TransportOp*>(user_data);
  op->request = nullptr;
  if (status != UCS_OK) [[unlikely]] {
    log_failed("receive", status);
    op->on_complete(op, ucx_status_code(status), 0, 0);
    return;
  }
  op->on_complete(op, absl::StatusCode::kOk, info->length, info->sender_tag);
}

// The same for a request from UCX's pool, which goes back once the completion is handed on
// (`info` lives in the request: own_recv_trampoline reads it first).
void recv_trampoline(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data) {
  own_recv_trampoline(request, status, info, user_data);
  ucp_request_free(request);
}

PostResult from_status_ptr(ucs_status_ptr_t r, TransportOp* op) {
  if (r == nullptr) return {Post::kDone};
  if (UCS_PTR_IS_ERR(r)) return {Post::kError, ucx_status_code(UCS_PTR_STATUS(r))};
  op->request = r;
  return {Post::kPending};
}

// Receives are posted with UCP_OP_ATTR_FLAG_NO_IMM_CMPL. One that completes inside the call
// (it matched a message already waiting) has had its callback run, which freed the request,
// and UCX still returns that request: keeping it would leave the op holding a freed request
// (later cancelled, or taken for a posted receive). The op is marked before the call; the
// callback clears the mark.
void* const kPosting =
    reinterpret_cast<void*>(std::uintptr_t{1});  // NOLINT(performance-no-int-to-ptr): a mark, never dereferenced

// Parameters of every receive: completion through the callback, never in place; the op
// marked as being posted. `request`: memory of the op's own for UCX's request, or nullptr for
// one from UCX's pool.
ucp_request_param_t recv_param(TransportOp* op, void* memh, void* request = nullptr) {
  ucp_request_param_t p;
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  p.cb.recv = recv_trampoline;
  if (request != nullptr) {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_REQUEST;
    p.request = request;
    p.cb.recv = own_recv_trampoline;
  }
  p.user_data = op;
  if (memh != nullptr) {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    p.memh = static_cast<ucp_mem_h>(memh);
  }
  op->request = kPosting;
  return p;
}

// Inlined into the receive posts (every re-posted receive passes here).
[[gnu::always_inline]] inline PostResult from_recv_status_ptr(ucs_status_ptr_t r, TransportOp* op) {
  if (r == nullptr || UCS_PTR_IS_ERR(r)) {
    op->request = nullptr;
    return from_status_ptr(r, op);
  }
  if (op->request == nullptr) return {Post::kPending};  // completed inside the call
  op->request = r;
  return {Post::kPending};
}

}  // namespace

// ---- memory ----------------------------------------------------------------------------

absl::StatusOr<MemoryRegistration> MemoryRegistration::map(const TransportContext& ctx, void* addr, std::size_t len) {
  ucp_mem_map_params_t p{};
  p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  p.address = addr;
  p.length = len;
  ucp_mem_h memh = nullptr;
  SLUICE_RETURN_IF_ERROR(
      ucx_status(ucp_mem_map(ctx_of(ctx.handle()), &p, &memh), absl::StrFormat("ucp_mem_map of %u bytes", len)));
  MemoryRegistration m;
  m.context_ = ctx.handle();
  m.memh_ = memh;
  return m;
}

MemoryRegistration::MemoryRegistration(MemoryRegistration&& o) noexcept : context_(o.context_), memh_(o.memh_) {
  o.memh_ = nullptr;
}

MemoryRegistration& MemoryRegistration::operator=(MemoryRegistration&& o) noexcept {
  if (this != &o) {
    reset();
    context_ = o.context_;
    memh_ = o.memh_;
    o.memh_ = nullptr;
  }
  return *this;
}

MemoryRegistration::~MemoryRegistration() { reset(); }

void MemoryRegistration::reset() {
  if (memh_ != nullptr) ucp_mem_unmap(ctx_of(context_), static_cast<ucp_mem_h>(memh_));
  memh_ = nullptr;
}

// ---- endpoint --------------------------------------------------------------------------

Endpoint::Endpoint(Endpoint&& o) noexcept : ep_(o.ep_), worker_(o.worker_), stream_(o.stream_), hub_(o.hub_) {
  o.ep_ = nullptr;
  o.stream_ = nullptr;
}

Endpoint& Endpoint::operator=(Endpoint&& o) noexcept {
  if (this != &o) {
    if (ep_ != nullptr || stream_ != nullptr) {
      void* r = start_close(true);
      if (r != nullptr) ucp_request_free(r);
    }
    ep_ = o.ep_;
    worker_ = o.worker_;
    stream_ = o.stream_;
    hub_ = o.hub_;
    o.ep_ = nullptr;
    o.stream_ = nullptr;
  }
  return *this;
}

Endpoint::~Endpoint() {
  if (stream_ != nullptr) close_stream();
  if (ep_ != nullptr) {
    void* r = start_close(true);
    if (r != nullptr) ucp_request_free(r);
  }
}

PostResult Endpoint::post_send(TransportOp* op, const void* buf, std::size_t len, Tag tag, void* memh) const {
  if (stream_ != nullptr) [[unlikely]]
    return stream_->post_send(op, buf, len, tag);
  ucp_request_param_t p;
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = send_trampoline;
  p.user_data = op;
  if (memh != nullptr) {
    p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    p.memh = static_cast<ucp_mem_h>(memh);
  }
  return from_status_ptr(ucp_tag_send_nbx(ep_of(ep_), buf, len, tag, &p), op);
}

absl::StatusCode Endpoint::send_now(const void* buf, std::size_t len, Tag tag) const {
  if (stream_ != nullptr) [[unlikely]]
    return stream_->send_now(buf, len, tag).code;
  ucp_request_param_t p;
  p.op_attr_mask = UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
  probe::round_end();
  ucs_status_ptr_t r = ucp_tag_send_nbx(ep_of(ep_), buf, len, tag, &p);
  if (r == nullptr) [[likely]]
    return absl::StatusCode::kOk;
  if (UCS_PTR_IS_ERR(r)) return ucx_status_code(UCS_PTR_STATUS(r));
  // Not reached in 1.13.1 (FORCE_IMM_CMPL never returns a request); should a later UCX
  // return one, the caller's buffer is on its stack: finish the send before returning.
  ucs_status_t st;
  while ((st = ucp_request_check_status(r)) == UCS_INPROGRESS) ucp_worker_progress(worker_of(worker_));
  ucp_request_free(r);
  return st == UCS_OK ? absl::StatusCode::kOk : ucx_status_code(st);
}

std::string Endpoint::transports() const {
  if (stream_ != nullptr) {
    auto suite = static_cast<stream::Suite>(stream_->options().suite);
    return suite == stream::Suite::kNone ? "sluice-tcp" : absl::StrFormat("sluice-tcp/%s", stream::to_string(suite));
  }
  if (ep_ == nullptr) return {};
  char* text = nullptr;
  std::size_t size = 0;
  FILE* f = ::open_memstream(&text, &size);
  if (f == nullptr) return {};
  ucp_ep_print_info(ep_of(ep_), f);
  std::fclose(f);
  // Lane lines read "#   0: ... lane[0]:  3:sysv/memory.0 md[2] ..."; keep each "tl/dev" once.
  std::string out;
  std::istringstream in(std::string(text, size));
  std::free(text);
  std::string line;
  while (std::getline(in, line)) {
    std::size_t lane = line.find("lane[");
    if (lane == std::string::npos) continue;
    std::istringstream words(line.substr(lane));
    std::string w;
    while (words >> w) {
      std::size_t colon = w.find(':'), slash = w.find('/');
      if (colon == std::string::npos || slash == std::string::npos || slash < colon) continue;
      std::string tl = w.substr(colon + 1);
      if (tl.size() > 2 && tl.compare(tl.size() - 2, 2, ".0") == 0) tl.resize(tl.size() - 2);
      if ((" " + out + " ").find(" " + tl + " ") == std::string::npos) out += (out.empty() ? "" : " ") + tl;
      break;
    }
  }
  return out;
}

void* Endpoint::start_close(bool force) {
  // A stream endpoint closes at once, whatever `force` says: what is unsent is cancelled.
  if (stream_ != nullptr) close_stream();
  if (ep_ == nullptr) return nullptr;
  ucp_request_param_t p;
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t r = ucp_ep_close_nbx(ep_of(ep_), &p);
  ep_ = nullptr;
  if (r == nullptr || UCS_PTR_IS_ERR(r)) return nullptr;
  return r;
}

void* Endpoint::start_flush() {
  if (ep_ == nullptr) return nullptr;
  ucp_request_param_t p;
  p.op_attr_mask = 0;
  ucs_status_ptr_t r = ucp_ep_flush_nbx(ep_of(ep_), &p);
  if (r == nullptr || UCS_PTR_IS_ERR(r)) return nullptr;
  return r;
}

// ---- worker ----------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Worker>> Worker::create(const TransportContext& ctx) {
  ucp_worker_params_t p{};
  p.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  p.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h w = nullptr;
  SLUICE_RETURN_IF_ERROR(ucx_status(ucp_worker_create(ctx_of(ctx.handle()), &p, &w), "ucp_worker_create"));
  std::unique_ptr<Worker> out(new Worker());
  out->worker_ = w;
  out->ctx_ = &ctx;
  SLUICE_RETURN_IF_ERROR(ucx_status(ucp_worker_get_efd(w, &out->efd_), "ucp_worker_get_efd"));
  ucp_address_t* addr = nullptr;
  std::size_t len = 0;
  SLUICE_RETURN_IF_ERROR(ucx_status(ucp_worker_get_address(w, &addr, &len), "ucp_worker_get_address"));
  out->address_.assign(reinterpret_cast<const char*>(addr), len);
  ucp_worker_release_address(w, addr);
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_REQUEST_SIZE;
  SLUICE_RETURN_IF_ERROR(ucx_status(ucp_context_query(ctx_of(ctx.handle()), &attr), "ucp_context_query"));
  out->request_size_ = attr.request_size;
  return out;
}

Worker::~Worker() {
  streams_.reset();  // calls nothing back
  delete fifo_;      // its receive on this worker cancelled, its worker gone
  if (worker_ != nullptr) ucp_worker_destroy(worker_of(worker_));
  // request_chunks_ go after the worker: nothing in UCX refers to them any more.
}

void* Worker::lend_request() {
  // UCX writes its request into the request_size_ bytes before the pointer it is given; each
  // starts a cache line.
  constexpr std::size_t kPerChunk = 64;
  const std::size_t stride = (request_size_ + 63) / 64 * 64;
  if (request_chunks_.empty() || chunk_used_ == kPerChunk) {
    request_chunks_.emplace_back(new std::byte[kPerChunk * stride + 63]);
    chunk_used_ = 0;
  }
  auto at = reinterpret_cast<std::uintptr_t>(request_chunks_.back().get());
  at = (at + 63) / 64 * 64 + chunk_used_++ * stride;
  return reinterpret_cast<void*>(at + request_size_);  // NOLINT(performance-no-int-to-ptr): within the chunk
}

absl::StatusOr<Endpoint> Worker::connect(std::string_view address, Endpoint::ErrorCallback on_error, void* arg) {
  // UCX checks a worker address with assertions: a malformed one from a peer would abort us.
  SLUICE_RETURN_IF_ERROR(check_ucx_address(address));
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  p.address = reinterpret_cast<const ucp_address_t*>(address.data());
  return make_endpoint(worker_, &p, on_error, arg, "ucp_ep_create (worker address)");
}

absl::StatusOr<Endpoint> Worker::make_endpoint(void* worker, void* params, Endpoint::ErrorCallback on_error, void* arg,
                                               const char* what) {
  ucp_ep_params_t& p = *static_cast<ucp_ep_params_t*>(params);
  // The handler struct must outlive the endpoint; endpoints live as long as the engine that
  // owns `arg`, so it is kept in a process-lifetime arena of small structs.
  static std::mutex mu;
  static std::deque<ErrorHandler> handlers;
  ErrorHandler* h;
  {
    std::lock_guard lock(mu);
    h = &handlers.emplace_back(ErrorHandler{on_error, arg});
  }
  p.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  p.err_handler.cb = ep_error_trampoline;
  p.err_handler.arg = h;
  ucp_ep_h ep = nullptr;
  SLUICE_RETURN_IF_ERROR(ucx_status(ucp_ep_create(worker_of(worker), &p, &ep), what));
  Endpoint out;
  out.ep_ = ep;
  out.worker_ = worker;
  return out;
}

PostResult Worker::post_recv(const Endpoint& from, TransportOp* op, void* buf, std::size_t len, Tag tag, Tag mask,
                             void* memh) {
  if (from.stream_ != nullptr) [[unlikely]]
    return from.stream_->post_recv(op, buf, len, tag, mask);
  ucp_request_param_t p = recv_param(op, memh);
  ucs_status_ptr_t r = ucp_tag_recv_nbx(worker_of(worker_), buf, len, tag, mask, &p);
  return from_recv_status_ptr(r, op);
}

absl::StatusCode Worker::post_recv_exact(const Endpoint& from, TransportOp* op, void* buf, std::size_t len, Tag tag,
                                         void* memh) {
  // The first post (no request memory yet) and streams out of line: what stays here keeps
  // only `op` across UCX's call, so it saves one register where it saved six.
  if (from.stream_ != nullptr || op->own_request == nullptr) [[unlikely]]
    return post_recv_exact_first(from, op, buf, len, tag, memh);
  ucp_request_param_t p = recv_param(op, memh, op->own_request);
  ucs_status_ptr_t r = ucp_tag_recv_nbx(worker_of(worker_), buf, len, tag, kFullMask, &p);
  if (UCS_PTR_IS_ERR(r)) [[unlikely]] {
    op->request = nullptr;
    return ucx_status_code(UCS_PTR_STATUS(r));
  }
  // As from_recv_status_ptr: completed inside the call (the callback cleared the mark), or
  // pending with its request. (NO_IMM_CMPL: never nullptr.)
  if (op->request != nullptr) op->request = r;
  return absl::StatusCode::kOk;
}

absl::StatusCode Worker::post_recv_exact_first(const Endpoint& from, TransportOp* op, void* buf, std::size_t len,
                                               Tag tag, void* memh) {
  if (from.stream_ != nullptr) return from.stream_->post_recv(op, buf, len, tag, kFullMask).code;
  op->own_request = lend_request();
  return post_recv_exact(from, op, buf, len, tag, memh);
}

Worker::Unexpected Worker::take_unexpected(Tag tag, Tag mask) {
  ucp_tag_recv_info_t info;
  ucp_tag_message_h m = ucp_tag_probe_nb(worker_of(worker_), tag, mask, 1, &info);
  if (m != nullptr) return {m, info.length, info.sender_tag};
  if (streams_) {
    if (StreamMsg* sm = streams_->take_unexpected(tag, mask)) return {sm, sm->length, sm->tag, true};
  }
  return {};
}

PostResult Worker::post_recv_message(TransportOp* op, const Unexpected& msg, void* buf, std::size_t len, void* memh) {
  if (msg.stream) {
    auto* m = static_cast<StreamMsg*>(msg.message);
    return m->conn->recv_message(op, m, buf, len);
  }
  ucp_request_param_t p = recv_param(op, memh);
  ucs_status_ptr_t r =
      ucp_tag_msg_recv_nbx(worker_of(worker_), buf, len, static_cast<ucp_tag_message_h>(msg.message), &p);
  return from_recv_status_ptr(r, op);
}

void Worker::cancel(TransportOp* op) {
  if (op->stream != nullptr) static_cast<StreamConn*>(op->stream)->cancel(op);
  else if (op->request != nullptr) ucp_request_cancel(worker_of(worker_), op->request);
}

bool Worker::has_unexpected(Tag tag, Tag mask) {
  ucp_tag_recv_info_t info;
  if (ucp_tag_probe_nb(worker_of(worker_), tag, mask, 0, &info) != nullptr) return true;
  return streams_ && streams_->has_unexpected(tag, mask);
}

bool Worker::progress() {
  // The stream test first: a worker without streams pays one compare, nothing kept across the call.
  if (streams_) [[unlikely]]
    return progress_with_streams();
  return ucp_worker_progress(worker_of(worker_)) != 0;
}

bool Worker::progress_with_streams() {
  bool any = ucp_worker_progress(worker_of(worker_)) != 0;
  return stream_progress() || any;
}

bool Worker::arm() {
  armed_ = true;  // a refused arm may have armed the FIFO too (refused for a datagram it read)
  return ucp_worker_arm(worker_of(worker_)) == UCS_OK;
}

void Worker::signal() { ucp_worker_signal(worker_of(worker_)); }

absl::Status Worker::wait_request(void* request, std::chrono::steady_clock::time_point deadline) {
  if (request == nullptr) return absl::OkStatus();
  // Spins for its first passes (a flush or close mostly ends within them), then sleeps between
  // those that find nothing, 50 us doubling to 1 ms: the peer may need a while to make room,
  // and on a shared core a spinning waiter takes the time it needs from it.
  constexpr int kSpins = 64;
  auto nap = std::chrono::microseconds(50);
  ucs_status_t s;
  for (int pass = 0; (s = ucp_request_check_status(request)) == UCS_INPROGRESS; ++pass) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ucp_request_cancel(worker_of(worker_), request);
      ucp_request_free(request);
      return absl::DeadlineExceededError("request did not complete before its deadline");
    }
    if (!progress() && pass >= kSpins) {
      std::this_thread::sleep_for(nap);
      nap = std::min(2 * nap, std::chrono::microseconds(1000));
    }
  }
  ucp_request_free(request);
  return ucx_status(s, "request");
}

void* Worker::close_failed(Endpoint& ep, std::chrono::steady_clock::duration flush_bound) {
  // A flush that does not end in time (a silent peer) is cancelled and freed by wait_request;
  // the force close then purges it with the rest.
  if (flush_bound > std::chrono::steady_clock::duration::zero())
    (void)wait_request(ep.start_flush(), std::chrono::steady_clock::now() + flush_bound);
  return ep.start_close(true);
}

}  // namespace sluice::detail
