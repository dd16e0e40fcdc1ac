// libFuzzer target for the UCX worker address validator (lib/transport/ucx_address.h): every
// input is validated, and every address the validator accepts is given to a real
// ucp_ep_create (UCP_ERR_HANDLING_MODE_PEER; one context and worker for the whole run), then the
// endpoint is closed by force: an accepted address that makes UCX assert, crash or read past the
// input (the copy is exactly its size, for ASan) is a finding.
//
// What no validation of the format can refuse is left out, as a matter of trusting the peer, not
// of parsing: the local context has no shared-memory transports (^sm; SLUICE_FUZZ_UCX_TLS changes
// it), since an accepted address may name any segment or process of this host, which UCX would
// map and write; and an address whose TCP interfaces are not those of the target's own peer is
// validated but not connected to, since it may name any TCP service, whose first reply UCX 1.13.1
// takes for its own header (an HTTP reply aborts it: tcp_ep.c:1404), and which would receive
// UCX's bytes. ucp_address_unpack still reads the shared-memory entries; the addresses naming
// another TCP service reach the validator only.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <ucp/api/ucp.h>
#include <ucs/config/global_opts.h>

#include "transport/ucx_address.h"

namespace {

// The port the seeds' TCP interfaces listened on (ucx_address_seeds.cpp): the peer below listens
// there again, so seeds made on this host name a live peer and connect for real.
constexpr const char* kPeerPort = "29613";

struct Ucx {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_context_h peer_context = nullptr;
  ucp_worker_h peer = nullptr;  // null when its port is taken (another run of this target)
};

// A context (tag feature) and worker with the UCX settings given, or nulls.
std::pair<ucp_context_h, ucp_worker_h> make_worker(
    std::initializer_list<std::pair<const char*, const char*>> settings) {
  ucp_config_t* cfg = nullptr;
  if (ucp_config_read(nullptr, nullptr, &cfg) != UCS_OK) std::abort();
  for (auto [name, value] : settings) {
    if (ucp_config_modify(cfg, name, value) != UCS_OK) std::abort();
  }
  ucp_params_t p{};
  p.field_mask = UCP_PARAM_FIELD_FEATURES;
  p.features = UCP_FEATURE_TAG;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  if (ucp_init(&p, cfg, &context) != UCS_OK) std::abort();
  ucp_config_release(cfg);
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  if (ucp_worker_create(context, &wp, &worker) != UCS_OK) {
    ucp_cleanup(context);
    return {nullptr, nullptr};
  }
  return {context, worker};
}

Ucx make_ucx() {
  Ucx u;
  // UCX's errors about the peers it cannot reach, one or more an input, unless asked for.
  if (std::getenv("UCX_LOG_LEVEL") == nullptr) (void)ucs_global_opts_set_value("LOG_LEVEL", "fatal");
  const char* tls = std::getenv("SLUICE_FUZZ_UCX_TLS");  // e.g. "all", on a machine with nothing to lose
  std::tie(u.context, u.worker) = make_worker({{"TLS", tls != nullptr ? tls : "^sm"}});
  if (u.worker == nullptr) std::abort();
  std::tie(u.peer_context, u.peer) = make_worker({{"TLS", "tcp"}, {"PORT_RANGE", kPeerPort}});
  return u;
}

Ucx& ucx() {
  static Ucx u = make_ucx();
  return u;
}

void progress() {
  ucp_worker_progress(ucx().worker);
  if (ucx().peer != nullptr) ucp_worker_progress(ucx().peer);
}

void on_error(void*, ucp_ep_h, ucs_status_t) {}

// How much of the run reached UCX, said at exit.
struct Counts {
  std::size_t inputs = 0, accepted = 0, other_tcp = 0, endpoints = 0;
  ~Counts() {
    std::fprintf(stderr,
                 "ucx_address_fuzz: %zu inputs, %zu accepted, %zu of them naming a TCP service other than the "
                 "peer, %zu endpoints created\n",
                 inputs, accepted, other_tcp, endpoints);
  }
} counts;

// Whether every TCP interface of `address` is one of the peer's (its device and port).
bool tcp_only_to_peer(const sluice::detail::UcxAddressInfo& address) {
  static const std::string peer_address = [] {
    if (ucx().peer == nullptr) return std::string();
    ucp_address_t* a = nullptr;
    std::size_t n = 0;
    if (ucp_worker_get_address(ucx().peer, &a, &n) != UCS_OK) std::abort();
    std::string out(reinterpret_cast<const char*>(a), n);
    ucp_worker_release_address(ucx().peer, a);
    return out;
  }();
  static const auto peer = sluice::detail::parse_ucx_address(peer_address);
  for (const auto& i : address.interfaces) {
    if (i.transport != "tcp") continue;
    if (!peer.ok()) return false;
    bool known = false;
    for (const auto& p : peer->interfaces) {
      known |= p.device_address == i.device_address && p.iface_address == i.iface_address;
    }
    if (!known) return false;
  }
  return true;
}

// Connects to `address`, lets the wireup start, and closes by force.
void connect_and_close(const std::vector<char>& address) {
  ucp_worker_h w = ucx().worker;
  ucp_ep_params_t p{};
  p.field_mask =
      UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  p.address = reinterpret_cast<const ucp_address_t*>(address.data());
  p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  p.err_handler.cb = on_error;
  ucp_ep_h ep = nullptr;
  if (ucp_ep_create(w, &p, &ep) != UCS_OK) return;
  ++counts.endpoints;
  for (int i = 0; i < 100; ++i) progress();
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* req = ucp_ep_close_nbx(ep, &rp);
  if (UCS_PTR_IS_ERR(req) || req == nullptr) return;
  while (ucp_request_check_status(req) == UCS_INPROGRESS) progress();
  ucp_request_free(req);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ++counts.inputs;
  std::vector<char> copy(size);  // exact size: ASan catches any read past it
  if (size) std::memcpy(copy.data(), data, size);
  auto info = sluice::detail::parse_ucx_address(std::string_view(copy.data(), copy.size()));
  if (!info.ok()) {
    if (info.status().message().empty()) std::abort();  // every refusal says why
    return 0;
  }
  ++counts.accepted;
  if (!tcp_only_to_peer(*info)) {
    ++counts.other_tcp;
    return 0;
  }
  connect_and_close(copy);
  return 0;
}
