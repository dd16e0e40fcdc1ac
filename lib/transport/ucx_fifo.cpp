// The watch over a UCX worker's shared-memory receive FIFO (ucx_fifo.h, Worker::check_fifo).

#include "transport/ucx_fifo.h"

#include <ucp/api/ucp.h>

#include <string>

#include "core/log.h"
#include "transport/ucx.h"

namespace sluice::detail {
namespace {

ucp_worker_h worker_of(void* p) { return static_cast<ucp_worker_h>(p); }

void probe_arrived(void* request, ucs_status_t /*status*/, const ucp_tag_recv_info_t* /*info*/, void* user_data) {
  static_cast<FifoWatch*>(user_data)->arrived();  // arrived, or cancelled by the destructor
  ucp_request_free(request);
}

void probe_ep_failed(void* /*arg*/, int status) {
  SLUICE_LOG(kWarn, "transport", "the shared-memory FIFO's probe endpoint failed: %s", ucx_status_name(status));
}

// The probe's own context: the main context's shared-memory transports alone (a worker of the main context
// would open UCX's TCP ports too, where SLUICE_UCX_TCP=y allows them), with the main context's
// FIFO size (a sender indexes the receiver's FIFO with its own size) and error handling (peer
// error mode, as the engine's endpoints use, takes shared memory only with it).
void* probe_context(const TransportContext& main) {
  if (main.shm_tls().empty()) return nullptr;  // UCX_TLS without sysv and posix
  ucp_config_t* cfg = nullptr;
  if (ucp_config_read(nullptr, nullptr, &cfg) != UCS_OK) return nullptr;
  bool ok = ucp_config_modify(cfg, "TLS", main.shm_tls().c_str()) == UCS_OK &&
            ucp_config_modify(cfg, "MM_ERROR_HANDLING", "y") == UCS_OK &&
            ucp_config_modify(cfg, "UNIFIED_MODE", "n") == UCS_OK &&
            ucp_config_modify(cfg, "ADAPTIVE_PROGRESS", "n") == UCS_OK &&  // as the main context: no abort
            (main.fifo_size().empty() || ucp_config_modify(cfg, "MM_FIFO_SIZE", main.fifo_size().c_str()) == UCS_OK);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  ucp_context_h ctx = nullptr;
  if (ok && ucp_init(&params, cfg, &ctx) != UCS_OK) ctx = nullptr;
  ucp_config_release(cfg);
  return ctx;
}

}  // namespace

std::unique_ptr<FifoWatch> FifoWatch::create(const TransportContext& main_ctx, void* main, const std::string& address) {
  std::unique_ptr<FifoWatch> w(new FifoWatch());
  w->main_ = main;
  w->context_ = probe_context(main_ctx);
  if (w->context_ == nullptr) {
    SLUICE_LOG(kDebug, "transport", "no shared-memory FIFO to watch: UCX has no sysv or posix transport here");
    return nullptr;
  }
  ucp_worker_params_t p{};
  p.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  p.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h probe = nullptr;
  if (ucs_status_t st = ucp_worker_create(static_cast<ucp_context_h>(w->context_), &p, &probe); st != UCS_OK) {
    SLUICE_LOG(kWarn, "transport", "no watch over the shared-memory FIFO: ucp_worker_create: %s",
               ucs_status_string(st));
    return nullptr;
  }
  w->probe_ = probe;
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
  absl::StatusOr<Endpoint> e =
      Worker::make_endpoint(probe, &ep, probe_ep_failed, nullptr, "ucp_ep_create (FIFO probe)");
  if (!e.ok()) {  // the main worker has neither (UCX_TLS without them)
    SLUICE_LOG(kDebug, "transport", "no shared-memory FIFO to watch: %s", e.status().message());
    return nullptr;
  }
  w->ep_ = std::move(*e);
  std::string tls = w->ep_.transports();
  if (!through_shared_fifo(tls)) {
    SLUICE_LOG(kDebug, "transport", "no shared-memory FIFO to watch (the probe reaches this worker over %s)",
               tls.empty() ? "nothing" : tls);
    return nullptr;
  }
  SLUICE_LOG(kDebug, "transport", "watching this worker's shared-memory FIFO (a probe over %s)", tls);
  return w;
}

FifoWatch::~FifoWatch() {
  // A posted receive that is cancelled completes inside the call (its callback clears rx_):
  // the main worker is not progressed here, where its other receives' owners may be gone.
  if (rx_ != nullptr) ucp_request_cancel(worker_of(main_), rx_);
  ep_ = Endpoint();  // force-closed before its worker goes
  if (probe_ != nullptr) ucp_worker_destroy(worker_of(probe_));
  if (context_ != nullptr) ucp_cleanup(static_cast<ucp_context_h>(context_));
}

Worker::Fifo FifoWatch::check(std::chrono::steady_clock::duration stall_after) {
  if (stalled_) return Worker::Fifo::kStalled;
  auto now = std::chrono::steady_clock::now();
  if (rx_ == nullptr) {  // the last probe came through: send the next
    through_sent_ = sent_;
    ucp_request_param_t rp;
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    rp.cb.recv = probe_arrived;
    rp.user_data = this;
    // A message of the probe's tag that waits already (no other process should send one)
    // completes the receive inside the call, its callback clearing the mark: it is dropped and
    // the receive posted again, a few times at most.
    for (int tries = 0; rx_ == nullptr; ++tries) {
      if (tries == 8) return Worker::Fifo::kSlow;
      static char posting;
      rx_ = &posting;
      ucs_status_ptr_t r = ucp_tag_recv_nbx(worker_of(main_), &rx_buf_, sizeof rx_buf_, kProbeTag, kFullMask, &rp);
      if (UCS_PTR_IS_ERR(r)) {
        rx_ = nullptr;
        SLUICE_LOG_RATE_LIMITED(kWarn, "transport", "the FIFO probe's receive: %s",
                                ucs_status_string(UCS_PTR_STATUS(r)));
        return Worker::Fifo::kNone;
      }
      if (rx_ != nullptr) rx_ = r;
    }
    ++tx_buf_;
    ucp_request_param_t sp;
    sp.op_attr_mask = 0;
    ucs_status_ptr_t s =
        ucp_tag_send_nbx(static_cast<ucp_ep_h>(ep_.handle()), &tx_buf_, sizeof tx_buf_, kProbeTag, &sp);
    if (UCS_PTR_IS_ERR(s)) {
      SLUICE_LOG_RATE_LIMITED(kWarn, "transport", "the FIFO probe's send: %s", ucs_status_string(UCS_PTR_STATUS(s)));
    } else if (s != nullptr) {
      ucp_request_free(s);  // completes once the FIFO has room; tx_buf_ outlives it (the destructor closes ep_ first)
    }
    sent_ = now;
  }
  // Both workers progress until the probe is through or nothing moves: what waits in the
  // FIFO before it is read first (in order), and a probe send that found the FIFO full goes.
  for (int i = 0; i < 64 && rx_ != nullptr; ++i) {
    unsigned moved = ucp_worker_progress(worker_of(probe_)) + ucp_worker_progress(worker_of(main_));
    if (moved == 0 && i >= 4) break;
  }
  if (rx_ == nullptr) return Worker::Fifo::kFlowing;
  return now - sent_ < stall_after ? Worker::Fifo::kSlow : Worker::Fifo::kHeld;
}

Worker::Fifo Worker::check_fifo(std::chrono::steady_clock::duration stall_after) {
  if (no_fifo_) return Fifo::kNone;
  if (fifo_ == nullptr) {
    std::unique_ptr<FifoWatch> w = FifoWatch::create(*ctx_, worker_, address_);
    if (w == nullptr) {
      no_fifo_ = true;
      return Fifo::kNone;
    }
    fifo_ = w.release();
  }
  return fifo_->check(stall_after);
}

void Worker::fifo_stopped() {
  if (fifo_ != nullptr) fifo_->stopped();
}

Worker::FifoProbe Worker::fifo_probe() const { return fifo_ != nullptr ? fifo_->probe() : FifoProbe{}; }

}  // namespace sluice::detail
