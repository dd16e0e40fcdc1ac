// Reproducer, plain UCP (no Sluice): a server keeps a dead client's shared-memory segments
// mapped after ucp_ep_close_nbx(FORCE) when sends to that client were pending as it died.
// docs/reliability.md, "The dead clients' segments". Build and run (scripts/debug/ucx_shm_leak.sh
// does both):
//   g++ -O1 -std=c++20 ucx_shm_leak.cpp -o ucx_shm_leak -lucp -lucs
//   ucx_shm_leak server PORT     ucx_shm_leak client PORT
// The server streams 4 KiB tagged sends (at most 256 pending) to the client, which progresses
// but posts no receive; the driver stops the client (its FIFO fills), then kills it. The server
// reports how many of the client's SysV segments it has mapped, at the peak and 2 s after the
// force close. Measured with UCX 1.13.1 (Debian 12), 2026-11-30: 10 still mapped after the
// close in 4 of 4 runs; 0 in 3 of 3 runs when the client is killed without being stopped first
// (no sends pending).
#include <arpa/inet.h>
#include <ucp/api/ucp.h>
#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_ep_h ep = nullptr;
static bool failed = false;
static int sends_failed = 0, sends_ok = 0;
static int client_pid = 0;

static void err_cb(void*, ucp_ep_h, ucs_status_t st) {
  fprintf(stderr, "server: ep error %s\n", ucs_status_string(st));
  failed = true;
}
static void conn_cb(ucp_conn_request_h req, void*) {
  ucp_ep_params_t p{};
  p.field_mask =
      UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  p.conn_request = req;
  p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  p.err_handler.cb = err_cb;
  if (ucp_ep_create(worker, &p, &ep) != UCS_OK) fprintf(stderr, "server: ep_create failed\n");
}
static void send_cb(void* r, ucs_status_t st, void*) {
  if (st == UCS_OK) ++sends_ok;
  else ++sends_failed;
  ucp_request_free(r);
}
static void recv_cb(void* r, ucs_status_t, const ucp_tag_recv_info_t*, void*) { ucp_request_free(r); }

static int all_shm() {
  std::ifstream m("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(m, line))
    if (line.find("SYSV") != std::string::npos || line.find("/dev/shm/") != std::string::npos) ++n;
  return n;
}
static int mapped_of(int owner) {
  std::set<std::string> ids;
  std::ifstream s("/proc/sysvipc/shm");
  std::string line;
  std::getline(s, line);
  while (std::getline(s, line)) {
    char key[32], id[32];
    int perms, cpid;
    unsigned long size;
    if (sscanf(line.c_str(), "%31s %31s %d %lu %d", key, id, &perms, &size, &cpid) == 5 && cpid == owner)
      ids.insert(id);
  }
  std::ifstream m("/proc/self/maps");
  int n = 0;
  while (std::getline(m, line)) {
    if (line.find("SYSV") == std::string::npos) continue;
    char a[64], perms[8], off[16], dev[16];
    unsigned long inode;
    if (sscanf(line.c_str(), "%63s %7s %15s %15s %lu", a, perms, off, dev, &inode) == 5 &&
        ids.count(std::to_string(inode)))
      ++n;
  }
  return n;
}

int main(int argc, char** argv) {
  bool server = std::string(argv[1]) == "server";
  int port = atoi(argv[2]);
  ucp_config_t* cfg;
  ucp_config_read(nullptr, nullptr, &cfg);
  if (ucp_config_modify(cfg, "MM_ERROR_HANDLING", "y") != UCS_OK) fprintf(stderr, "MM_ERROR_HANDLING refused\n");
  if (ucp_config_modify(cfg, "MEMORY_INVALIDATE", "y") != UCS_OK) fprintf(stderr, "MEMORY_INVALIDATE refused\n");
  ucp_params_t pp{};
  pp.field_mask = UCP_PARAM_FIELD_FEATURES;
  pp.features = UCP_FEATURE_TAG;
  if (ucp_init(&pp, cfg, &ctx) != UCS_OK) return 1;
  ucp_config_release(cfg);
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_create(ctx, &wp, &worker);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  std::vector<char> buf(4096);
  if (server) {
    ucp_listener_params_t lp{};
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = reinterpret_cast<sockaddr*>(&sa);
    lp.sockaddr.addrlen = sizeof(sa);
    lp.conn_handler.cb = conn_cb;
    ucp_listener_h l;
    if (ucp_listener_create(worker, &lp, &l) != UCS_OK) return 2;
    fprintf(stderr, "server: shm mappings before any client: %d\n", all_shm());
    printf("listening\n");
    fflush(stdout);
    while (ep == nullptr) ucp_worker_progress(worker);
    // The client's pid comes first.
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
    rp.cb.recv = recv_cb;
    void* r = ucp_tag_recv_nbx(worker, &client_pid, sizeof(client_pid), 1, ~0ull, &rp);
    while (r != nullptr && !UCS_PTR_IS_ERR(r) && ucp_request_check_status(r) == UCS_INPROGRESS)
      ucp_worker_progress(worker);
    fprintf(stderr, "server: client pid %d\n", client_pid);
    // Stream 4 KiB messages it never receives, at most 512 outstanding, until the ep fails.
    int peak = 0;
    long issued = 0;
    while (!failed && sends_failed == 0) {
      ucp_worker_progress(worker);
      peak = std::max(peak, all_shm());
      if (issued - (sends_ok + sends_failed) >= 256) continue;
      ucp_request_param_t sp{};
      sp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
      sp.cb.send = send_cb;
      void* s = ucp_tag_send_nbx(ep, buf.data(), buf.size(), 2, &sp);
      if (UCS_PTR_IS_ERR(s)) {
        fprintf(stderr, "server: send error %s\n", ucs_status_string(UCS_PTR_STATUS(s)));
        break;
      }
      if (s == nullptr) ++sends_ok;
      ++issued;
    }
    fprintf(stderr, "server: failed=%d sends_failed=%d ok=%d; client's segments mapped (peak %d): %d\n", failed,
            sends_failed, sends_ok, peak, mapped_of(client_pid));
    ucp_request_param_t cp{};
    cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* c = ucp_ep_close_nbx(ep, &cp);
    fprintf(stderr, "server: close %s\n", c == nullptr ? "done at once" : UCS_PTR_IS_ERR(c) ? "error" : "pending");
    for (int i = 0; i < 3000000; ++i) ucp_worker_progress(worker);
    sleep(2);
    for (int i = 0; i < 1000000; ++i) ucp_worker_progress(worker);
    fprintf(stderr, "server: after close and 2 s: client's segments mapped: %d, all shm mappings %d\n",
            mapped_of(client_pid), all_shm());
    return 0;
  }
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  p.sockaddr.addr = reinterpret_cast<sockaddr*>(&sa);
  p.sockaddr.addrlen = sizeof(sa);
  p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ucp_ep_create(worker, &p, &ep);
  int pid = getpid();
  ucp_request_param_t sp{};
  void* s = ucp_tag_send_nbx(ep, &pid, sizeof(pid), 1, &sp);
  while (s != nullptr && !UCS_PTR_IS_ERR(s) && ucp_request_check_status(s) == UCS_INPROGRESS)
    ucp_worker_progress(worker);
  printf("sent pid\n");
  fflush(stdout);
  // Progress (so the connection stays served) but receive nothing; the driver kills us.
  while (true) ucp_worker_progress(worker);
}
