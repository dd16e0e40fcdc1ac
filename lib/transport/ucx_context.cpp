// The UCX context: the transports Sluice asks of UCX (shared-memory error handling, the FIFO
// size, CMA when it works, no TCP outside rank mode) and what it reports.
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <vector>

#include <absl/strings/str_format.h>

#include "core/log.h"
#include "core/tls.h"
#include "transport/transport.h"
#include "transport/ucx.h"

namespace sluice::detail {
namespace {

ucp_context_h ctx_of(void* p) { return static_cast<ucp_context_h>(p); }

// CMA moves rendezvous payloads between local processes with one copy; it needs ptrace
// permission between them (Yama, seccomp in containers). A child reading its parent's memory
// is refused under the same rules that refuse two sibling ranks.
bool cma_works() {
  static bool works = [] {
    volatile std::uint64_t probe = 0x5c1e5c1e5c1e5c1eULL;
    pid_t parent = getpid();
    pid_t child = fork();
    if (child < 0) return false;
    if (child == 0) {
      std::uint64_t out = 0;
      iovec local{&out, sizeof(out)};
      iovec remote{const_cast<std::uint64_t*>(&probe), sizeof(probe)};
      ssize_t n = process_vm_readv(parent, &local, 1, &remote, 1, 0);
      _exit(n == sizeof(out) && out == 0x5c1e5c1e5c1e5c1eULL ? 0 : 1);
    }
    int wstatus = 0;
    while (waitpid(child, &wstatus, 0) < 0 && errno == EINTR) {}
    return WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
  }();
  return works;
}

// SysV shared memory takes one lock of the IPC namespace, for writing, in every attach and
// detach: 1,000 engines closing at once queued on it, and a sender waiting behind its own
// process's detaches held the server's FIFO element it had claimed, 5-11 s in 18 of 19 runs
// (docs/reliability.md). POSIX shared memory (files in /dev/shm) held it in 0 of 6. A small
// /dev/shm (a container's 64 MiB) has no room for the receive buffers (4 MiB an engine).
constexpr std::uint64_t kPosixRoom = std::uint64_t{256} << 20;

bool posix_has_room(const std::string& dir) {
  struct statvfs fs {};
  if (::statvfs(dir.empty() ? "/dev/shm" : dir.c_str(), &fs) != 0) return false;
  return std::uint64_t{fs.f_bavail} * fs.f_frsize >= kPosixRoom;
}

// The list as this host needs it, where the user left the choice to Sluice: without cma when
// it does not work here, and with one shared-memory transport, not both (UCX would open both
// and use sysv): posix where /dev/shm has room.
std::string for_this_host(std::string tls, const Config& config, const ProcessEnv& env) {
  if (!cma_works()) {
    static std::once_flag once;
    std::call_once(once, [] {
      SLUICE_LOG(kWarn, "transport",
                 "cma does not work between processes here (ptrace permission, see "
                 "/proc/sys/kernel/yama/ptrace_scope): local rendezvous uses shared memory copies");
    });
    if (tls.empty() && env.ucx_tls.empty()) tls = "^cma";  // a UCX_TLS of the user's stays as given
    else if (tls == "^tcp") tls = "^tcp,cma";
  }
  if (config.tls.empty() && env.ucx_tls.empty() && posix_has_room(env.ucx_posix_dir))
    tls = TlsList(tls).without("sysv").str();
  return tls;
}

}  // namespace

// ---- context ---------------------------------------------------------------------------

// The transport list Sluice asks of UCX (empty: UCX_TLS as the user gave it, or UCX's own
// choice): SLUICE_TLS when set, else UCX_TLS; without UCX's TCP when `ucx_tcp` is false.
static std::string chosen_tls(const Config& config, const ProcessEnv& env, bool ucx_tcp) {
  if (!config.tls.empty() && !env.ucx_tls.empty() && config.tls != env.ucx_tls) {
    SLUICE_LOG(kWarn, "transport", "SLUICE_TLS=%s overrides UCX_TLS=%s (unset one of them to silence this)", config.tls,
               env.ucx_tls);
  }
  if (ucx_tcp) return config.tls;
  // UCX's TCP transport listens on every interface and trusts whoever sends its magic: not in
  // client/server mode, whose remote peers use the stream transport instead.
  const std::string& given = !config.tls.empty() ? config.tls : env.ucx_tls;
  TlsList list(given);
  TlsList kept = list.without("tcp");
  if (!list.excludes() && list.names("tcp")) {
    SLUICE_LOG(kWarn, "transport",
               "%s=%s: UCX's tcp is left out in client/server mode (peers on other hosts use Sluice's TCP "
               "transport on the door's connection), so UCX gets %s; SLUICE_CS_TRANSPORT=stream carries every "
               "client's data over TCP, on this host too; SLUICE_UCX_TCP=y lets UCX open its TCP ports",
               !config.tls.empty() ? "SLUICE_TLS" : "UCX_TLS", given, kept.str());
  }
  return kept.str();
}

absl::StatusOr<std::unique_ptr<TransportContext>> TransportContext::create(const Config& config, const ProcessEnv& env,
                                                                           bool ucx_tcp) {
  ucp_config_t* cfg = nullptr;
  SLUICE_RETURN_IF_ERROR(ucx_status(ucp_config_read(nullptr, nullptr, &cfg), "ucp_config_read"));
  struct Release {
    ucp_config_t* c;
    ~Release() { ucp_config_release(c); }
  } release{cfg};
  // Peer error mode drops shared memory and CMA for local peers unless their own error
  // handling is on (UCX 1.13.1, measured): without these, local traffic falls back to TCP loopback.
  // These are UCX_SYSV_ERROR_HANDLING, UCX_POSIX_ERROR_HANDLING and UCX_CMA_MEMORY_INVALIDATE;
  // through ucp_config_modify, UCX 1.13 matches them by the name of the table that declares
  // them (MM_ for both shared-memory transports, no prefix for the CMA memory domain): the
  // prefixed names are reported as "invalid configuration" and silently not applied. They are
  // set only when the transports that read them may be in use, or UCX warns about them.
  std::string tls = chosen_tls(config, env, ucx_tcp);
  const std::string& chosen = !tls.empty() ? tls : env.ucx_tls;
  // Read as UCX reads it: "shm" and "sm" stand for sysv, posix and cma too, "^sm" for none of them.
  const TlsList list(chosen);
  // `shown` is how `ucx_info -c` names the setting.
  std::vector<std::string> settings;
  std::string fifo_size;
  auto set = [&](const char* name, const std::string& value, const char* shown) {
    ucs_status_t s = ucp_config_modify(cfg, name, value.c_str());
    if (s == UCS_OK) {
      settings.push_back(absl::StrFormat("%s=%s", shown, value));
    } else {
      SLUICE_LOG(kWarn, "transport", "cannot set %s=%s: %s", shown, value.c_str(), ucs_status_string(s));
    }
  };
  if (list.may_use("sysv") || list.may_use("posix") || list.may_use("xpmem")) {
    set("MM_ERROR_HANDLING", "y", "UCX_{SYSV,POSIX}_ERROR_HANDLING");
    // A peer's receive FIFO that fills up keeps that peer's shared memory mapped here for good
    // once UCX fails the endpoint (shm_fifo_size() in ucx.h), so it is made larger than what
    // this process can leave in it. A size the user gave UCX is left alone.
    if (!env.ucx_fifo_size_set) {
      fifo_size = std::to_string(shm_fifo_size(config.credits));
      set("MM_FIFO_SIZE", fifo_size, "UCX_{SYSV,POSIX}_FIFO_SIZE");
    }
  }
  if (list.may_use("cma")) set("MEMORY_INVALIDATE", "y", "UCX_CMA_MEMORY_INVALIDATE");
  // Worker addresses in UCX's default format, the one check_ucx_address knows (unified mode
  // packs them differently).
  set("UNIFIED_MODE", "n", "UCX_UNIFIED_MODE");
  tls = for_this_host(tls, config, env);
  // The list UCX gets, as it reads it (empty: UCX_TLS as the user gave it, or all).
  const TlsList used(!tls.empty() ? tls : env.ucx_tls);
  // UCX 1.13 polls an interface no endpoint uses yet on its own ("adaptive progress"); when
  // such a shared-memory interface reads an empty datagram on its wake-up socket, which any
  // local process may send, it aborts the process. Off, that read only wakes the engine.
  // Left on where UCX's TCP may be in use: off, every pass would poll TCP (am_lat 2.4x).
  if (!env.ucx_adaptive_progress_set && !used.may_use("tcp")) set("ADAPTIVE_PROGRESS", "n", "UCX_ADAPTIVE_PROGRESS");
  if (!tls.empty()) {
    SLUICE_RETURN_IF_ERROR(
        ucx_status(ucp_config_modify(cfg, "TLS", tls.c_str()), absl::StrFormat("SLUICE_TLS=%s", tls)));
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 1;
  ucp_context_h ctx = nullptr;
  ucs_status_t s = ucp_init(&params, cfg, &ctx);
  if (s != UCS_OK) {
    return ucx_status(s, tls.empty() ? std::string("ucp_init") : absl::StrFormat("ucp_init with SLUICE_TLS=%s", tls));
  }
  std::unique_ptr<TransportContext> out(new TransportContext());
  out->context_ = ctx;
  // The list is shown where Sluice changed it: client/server mode, or a choice left to it.
  if (!ucx_tcp || (!tls.empty() && tls != (!config.tls.empty() ? config.tls : env.ucx_tls)))
    settings.push_back(absl::StrFormat("UCX_TLS=%s", tls));
  out->settings_ = std::move(settings);
  out->ucx_tcp_ = ucx_tcp;
  out->fifo_size_ = std::move(fifo_size);
  // The shared-memory FIFOs this context's workers may have: what the final list allows.
  for (const char* shm : {"sysv", "posix"})
    if (used.may_use(shm)) out->shm_tls_ += out->shm_tls_.empty() ? shm : std::string(",") + shm;
  return out;
}

TransportContext::~TransportContext() {
  if (context_ != nullptr) ucp_cleanup(ctx_of(context_));
}

std::string TransportContext::describe() const {
  char* buf = nullptr;
  std::size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  if (f == nullptr) return "cannot describe transports\n";
  ucp_context_print_info(ctx_of(context_), f);
  std::fclose(f);
  std::string out(buf, len);
  std::free(buf);
  out += "#\n# set by Sluice:";
  for (const std::string& s : settings_) out += " " + s;
  return out + (settings_.empty() ? " nothing\n" : "\n");
}

}  // namespace sluice::detail
