// Every SLUICE_* variable, one declarative table per component.
#include "core/config_table.h"
#include "core/fault.h"

#include <algorithm>
#include <vector>

#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>

#include "core/config_fields.h"
#include "core/strings.h"
#include "core/tls.h"

namespace sluice::detail {
namespace {

using namespace config_fields;  // NOLINT(google-build-using-namespace): the table below is made of them

std::vector<Field> core_vars() {
  return {
      enum_var("SLUICE_LOG_LEVEL", "core", "warn", "Log level: messages at this level and more severe go to stderr.",
               &Config::log_level,
               {{"error", LogLevel::kError},
                {"warn", LogLevel::kWarn},
                {"info", LogLevel::kInfo},
                {"debug", LogLevel::kDebug},
                {"trace", LogLevel::kTrace}}),
      bool_var("SLUICE_STATS", "core", "n", "Print every engine's counters to stderr when it is destroyed.",
               &Config::stats),
      {"SLUICE_STATS_TRIGGER", "core", "list: exit | signal:USR1 | signal:USR2 | timer:DURATION | none", "none",
       "When each engine writes its counters and its busiest peers' as one JSON line to "
       "SLUICE_STATS_DEST: when it is destroyed, when the process gets the signal, every DURATION "
       "(at least 10ms); comma-separated, e.g. signal:USR1,exit. Noticed in progress(), within a "
       "timer tick.",
       [](std::string_view s, Settings& c) -> absl::Status {
         auto t = parse_stats_trigger(s);
         if (!t.ok()) return t.status();
         c.stats_trigger = *t;
         return absl::OkStatus();
       },
       [](const Settings& c) { return format_stats_trigger(c.stats_trigger); }},
      {"SLUICE_STATS_DEST", "core", "stderr | file:PATH", "stderr",
       "Where SLUICE_STATS_TRIGGER's lines go: stderr, or appended to the file PATH, in which %p "
       "is the process id and %h the host name.",
       [](std::string_view s, Settings& c) -> absl::Status {
         std::string v(sluice::detail::trim(s));
         if (v != "stderr" && (v.rfind("file:", 0) != 0 || v.size() == 5))
           return absl::InvalidArgumentError("not stderr or file:PATH");
         c.stats_dest = v;
         return absl::OkStatus();
       },
       [](const Settings& c) { return c.stats_dest; }},
  };
}

std::vector<Field> am_vars() {
  return {
      {"SLUICE_EAGER_MAX", "am", "size | auto", "auto",
       "Largest message sent eagerly, counting its user header and payload together (both in "
       "one tagged message with the wire header); a larger one sends its payload by "
       "rendezvous, zero-copy. auto: 8K, UCX's own eager/rendezvous switch on shared memory "
       "(see docs/flow-control.md).",
       [](std::string_view s, Settings& c) -> absl::Status {
         if (sluice::detail::lower(sluice::detail::trim(s)) == "auto") {
           c.eager_max.reset();
           return absl::OkStatus();
         }
         auto v = parse_size(s);
         if (!v.ok()) return v.status();
         if (*v > (std::size_t{1} << 20)) return absl::InvalidArgumentError("above 1M");
         c.eager_max = *v;
         return absl::OkStatus();
       },
       [](const Settings& c) { return c.eager_max ? format_size(*c.eager_max) : std::string("auto"); }},
      bool_var("SLUICE_RNDV", "am", "y",
               "Rendezvous for large payloads. n: cut them into eager pieces copied through "
               "send and receive pool slots (the bounce-buffer baseline for benchmarks).",
               &Config::rndv),
      bool_var("SLUICE_COALESCE", "am", "y",
               "Small messages (up to 1 KiB) that wait in a peer's send queue for credits share "
               "tagged messages (up to half the grant in one), each with its own header, "
               "sequence and credit. n: one tagged message each.",
               &Config::coalesce),
      size_var("SLUICE_MAX_MESSAGE", "am", "1G",
               "Largest payload a peer may announce; a larger announcement is refused with "
               "InvalidArgument before anything is allocated.",
               &Config::max_message, 1),
  };
}

std::vector<Field> flow_vars() {
  return {
      int_var<std::uint32_t>(
          "SLUICE_CREDITS", "flow", "32",
          "Eager credits granted to each peer at its handshake: messages it may have in "
          "flight to this engine, each backed by a reserved receive slot (fewer when the "
          "receive budget is short, at least 2; more by demand: SLUICE_CREDITS_MAX). "
          "Also sizes UCX's shared-memory FIFOs (UCX_SYSV_FIFO_SIZE and UCX_POSIX_FIFO_SIZE, unless one of those or UCX_MM_FIFO_SIZE is set).",
          &Config::credits, 2, 65535),
      int_var<std::uint32_t>("SLUICE_CREDITS_MAX", "flow", "128",
                             "Most credits one peer may hold: a peer whose messages wait for credits "
                             "is lent more, up to this (never less than SLUICE_CREDITS), from the "
                             "receive budget that other peers leave unused; idle peers give theirs "
                             "back down to 2 when another peer waits for them. A client whose messages "
                             "come through this process's shared-memory FIFO is lent no more than "
                             "that FIFO holds from one sender (37 for SLUICE_CREDITS=32).",
                             &Config::credits_max, 2, 65535),
      int_var<std::uint32_t>("SLUICE_RX_POSTED", "flow", "8",
                             "Receives first posted for each peer (exact tag; at most its credits), "
                             "each with a receive slot reserved beside the credits'. One that finds "
                             "a message waiting in UCX adds one, up to one per credit beyond these.",
                             &Config::rx_posted, 1, 1024),
      int_var<std::uint32_t>("SLUICE_SEND_QUEUE_MAX", "flow", "4096",
                             "Messages a peer's send queue holds while waiting for credits; "
                             "beyond it sends return WouldBlock.",
                             &Config::send_queue_max, 1, 1 << 24),
      int_var<std::uint32_t>("SLUICE_RPC_WINDOW", "flow", "32",
                             "RPC window granted at the handshake: requests a server lets each "
                             "client have unanswered at once (a request counts until it is "
                             "answered; fewer when the send budget is short, at least 1; more by "
                             "demand: SLUICE_RPC_WINDOW_MAX). Twice as many send slots are held "
                             "back per client for replies, so replies still in flight have room too.",
                             &Config::rpc_window, 1, 65535),
      int_var<std::uint32_t>("SLUICE_RPC_WINDOW_MAX", "flow", "128",
                             "Widest RPC window one client may hold: a client whose calls wait for "
                             "the window is given more, up to this (never less than "
                             "SLUICE_RPC_WINDOW), from the send budget that other clients leave "
                             "unused; idle clients give theirs back down to 1 when another waits.",
                             &Config::rpc_window_max, 1, 65535),
  };
}

std::vector<Field> mem_vars() {
  return {
      size_var("SLUICE_SEND_POOL_MAX", "mem", "256M",
               "Budget of an engine's send pool (registered memory for outgoing eager and "
               "copied messages).",
               &Config::send_pool_max, 4096),
      size_var("SLUICE_RECV_POOL_MAX", "mem", "256M",
               "Budget of an engine's receive pool (posted receives, credits granted to "
               "peers, every rendezvous landing not in a handler's sink; a landing that "
               "does not fit waits at the sender).",
               &Config::recv_pool_max, 4096),
      size_var("SLUICE_POOL_CHUNK", "mem", "2M",
               "Pools start with one chunk and grow by chunks of this size (rounded up to "
               "whole slots and pages) up to their budget.",
               &Config::pool_chunk, 4096),
      {"SLUICE_POOL_CLASSES", "mem", "list of sizes", "64K,1M,4M",
       "Slot sizes of the pools' large classes (rendezvous landing slots; send_copy), "
       "besides the eager class; larger landings get arenas of their own, kept for reuse.",
       [](std::string_view s, Settings& c) -> absl::Status {
         std::vector<std::size_t> out;
         for (std::string_view part : sluice::detail::split(s, ',')) {
           auto v = parse_size(part);
           if (!v.ok()) return v.status();
           if (*v < 1024) return absl::InvalidArgumentError("a class below 1K");
           out.push_back(*v);
         }
         std::sort(out.begin(), out.end());
         out.erase(std::unique(out.begin(), out.end()), out.end());
         if (out.size() > 8) return absl::InvalidArgumentError("more than 8 classes");
         c.pool_classes = std::move(out);
         return absl::OkStatus();
       },
       [](const Settings& c) {
         std::vector<std::string> parts;
         for (auto v : c.pool_classes) parts.push_back(format_size(v));
         return absl::StrJoin(parts, ",");
       }},
      enum_var("SLUICE_HUGEPAGES", "mem", "try",
               "2 MiB huge pages for pool arenas: try (fall back to 4 KiB pages), yes (fail "
               "when none are available), no.",
               &Config::hugepages, {{"try", HugePages::kTry}, {"yes", HugePages::kYes}, {"no", HugePages::kNo}}),
      {"SLUICE_NUMA", "mem", "auto | nic | node number", "auto",
       "NUMA node of an engine's pools: auto (node of the CPU running the engine), nic "
       "(node of its RDMA device, else auto), or a node number.",
       [](std::string_view s, Settings& c) -> absl::Status {
         std::string v = sluice::detail::lower(sluice::detail::trim(s));
         if (v == "auto") {
           c.numa = {NumaPolicy::Kind::kAuto, -1};
         } else if (v == "nic") {
           c.numa = {NumaPolicy::Kind::kNic, -1};
         } else {
           auto n = parse_int<int>(v, 0, 4095);
           if (!n.ok()) return absl::InvalidArgumentError("not auto, nic or a node number");
           c.numa = {NumaPolicy::Kind::kNode, *n};
         }
         return absl::OkStatus();
       },
       [](const Settings& c) -> std::string {
         switch (c.numa.kind) {
           case NumaPolicy::Kind::kAuto: return "auto";
           case NumaPolicy::Kind::kNic: return "nic";
           case NumaPolicy::Kind::kNode: return std::to_string(c.numa.node);
         }
         return "?";
       }},
  };
}

std::vector<Field> liveness_vars() {
  return {
      duration_var("SLUICE_PEER_TIMEOUT", "flow", "10s",
                   "A peer silent this long (no message, no heartbeat answer) is declared dead; its operations "
                   "complete with Unavailable. A server whose shared-memory FIFO passes no probe for all of it, or "
                   "for half of it (at least 1 s) after a local client's process ended, fails the local clients "
                   "over it and serves later ones over Sluice's TCP transport.",
                   &Config::peer_timeout, true),
      duration_var("SLUICE_HEARTBEAT", "flow", "1s",
                   "Interval of heartbeats to peers that have been idle this long (longer with many peers: "
                   "SLUICE_HEARTBEAT_RATE). A server pings its quiet clients; a client pings its server only "
                   "after half of SLUICE_PEER_TIMEOUT without a word from it.",
                   &Config::heartbeat, false),
      int_var<std::uint32_t>("SLUICE_HEARTBEAT_RATE", "flow", "250",
                             "Heartbeats per second an engine sends at most: with more live peers than this "
                             "times SLUICE_HEARTBEAT, each is pinged less often (at most a third of "
                             "SLUICE_PEER_TIMEOUT apart), so idle clients cost a server the same however many.",
                             &Config::heartbeat_rate, 1u, 1000000u),
      duration_var("SLUICE_CONNECT_TIMEOUT", "flow", "10s",
                   "Deadline for connecting and handshaking with a peer, and for bootstrap fences.",
                   &Config::connect_timeout, true),
      duration_var("SLUICE_CALL_WARN", "rpc", "30s",
                   "A call without a timeout outstanding this long is logged once (peer, method, "
                   "age) and counted in rpc.overdue; it goes on waiting. inf: never.",
                   &Config::call_warn, true),
      duration_var("SLUICE_SPIN", "progress", "100us",
                   "Engine::run_until() busy-polls while there is work and at most this long "
                   "after the last of it, then sleeps until a message, a timer or post() wakes it "
                   "(the core goes to other threads: what keeps an oversubscribed machine "
                   "from crawling). Each sleep that outlasts the spin halves it, down to none; "
                   "each that ends within this time doubles it again. inf: never sleep.",
                   &Config::spin, true),
  };
}

std::vector<Field> door_vars() {
  return {
      enum_var("SLUICE_AUTH", "door", "auto",
               "Authentication of client/server connections by the shared key of "
               "SLUICE_AUTH_KEY_FILE, both ways, before any UCX endpoint exists: required (a "
               "peer that cannot prove the key is refused with PermissionDenied), optional (a "
               "server also admits clients without a key, a client also servers without one; "
               "a wrong key is still refused), off (anyone who reaches the port may connect: "
               "docs/security.md). auto: required when a key file is set, off otherwise.",
               &Config::auth,
               {{"auto", AuthMode::kAuto},
                {"off", AuthMode::kOff},
                {"optional", AuthMode::kOptional},
                {"required", AuthMode::kRequired}}),
      string_var("SLUICE_AUTH_KEY_FILE", "door", "path", "",
                 "File holding the secret that servers and their clients share: 16 bytes to "
                 "4 KiB (trailing white space ignored), readable by its owner only (mode 600 or "
                 "400). sluice-info --new-key FILE writes one.",
                 &Config::auth_key_file),
      duration_var("SLUICE_HANDSHAKE_TIMEOUT", "door", "3s",
                   "A server closes a connection that has not completed its pre-handshake "
                   "within this time, and its whole first frame within 1 s of the accept or "
                   "this time, the shorter (a client that sends nothing, or trickles bytes).",
                   &Config::handshake_timeout, true),
      int_var<std::uint32_t>("SLUICE_HANDSHAKE_MAX", "door", "64",
                             "Connections a server keeps in pre-handshake at once; a new one "
                             "beyond it closes the oldest that has not sent its whole first frame, "
                             "or waits in the listen backlog when every one has. One client "
                             "address holds at most a quarter of them before its hello.",
                             &Config::handshake_max, 1, 65536),
      enum_var("SLUICE_ENCRYPT", "door", "off",
               "Encryption of client/server traffic that leaves the host (Sluice's TCP "
               "transport; shared-memory peers are not encrypted): on (a server encrypts every "
               "such client, a client refuses a server that does not), off (a client still "
               "follows a server that encrypts). Needs SLUICE_AUTH_KEY_FILE: the keys come from "
               "the door's authenticated handshake. AES-256-GCM where both CPUs have AES-NI, "
               "else ChaCha20-Poly1305 (OpenSSL).",
               &Config::encrypt, {{"off", Encrypt::kOff}, {"on", Encrypt::kOn}}),
      enum_var("SLUICE_CS_TRANSPORT", "door", "auto",
               "What carries a client/server peer's data, chosen by the server when it admits the client: auto (UCX "
               "over shared memory when it reaches the client, i.e. on the same host; else Sluice's TCP transport "
               "on the door's connection), stream (Sluice's TCP transport for every client, on the same host too).",
               &Config::cs_transport, {{"auto", CsTransport::kAuto}, {"stream", CsTransport::kStream}}),
  };
}

std::vector<Field> transport_vars() {
  return {
      {"SLUICE_TLS", "transport", "list of UCX transports and aliases | ^list", "",
       "UCX transports to use, passed to UCX as UCX_TLS and read as UCX reads it: transport "
       "names (self, tcp, sysv, posix, cma, ...) and UCX's aliases (sm and shm: every "
       "shared-memory transport; mm: sysv, posix, xpmem), or ^ and the ones not to use; e.g. shm, "
       "sm,tcp, ^tcp. A list that leaves processes on one host neither shared memory nor a "
       "network transport is refused (cma moves only large payloads). Empty: UCX's own choice, "
       "without sysv where /dev/shm has 256 MiB free (local peers meet over posix).",
       [](std::string_view s, Settings& c) -> absl::Status {
         c.tls = TlsList(s).str();
         return absl::OkStatus();
       },
       [](const Settings& c) { return c.tls; }},
      enum_var("SLUICE_UCX_TCP", "transport", "auto",
               "Whether UCX may use its TCP transport, which listens on a port per network "
               "interface and trusts any peer that sends its public magic (remote memory "
               "writes included: docs/security.md). auto: in rank mode (a job of several "
               "ranks, on the trusted fabric of a cluster) when its launcher does not say that "
               "every rank is on this host (SLUICE_LOCAL_SIZE, PMIx's local size) or the "
               "transport list names tcp; not in client/server mode, where "
               "peers on other hosts use Sluice's own TCP transport on the door's connection. "
               "y: also in client/server mode, for a fabric where every host is trusted (the "
               "engine logs the ports it opens). n: never (ranks on one host only).",
               &Config::ucx_tcp, {{"auto", UcxTcp::kAuto}, {"y", UcxTcp::kYes}, {"n", UcxTcp::kNo}}),
  };
}

std::vector<Field> boot_vars() {
  return {
      {"SLUICE_BOOT", "boot", "auto | pmix | sluice-run | file:PATH | single", "auto",
       "How ranks find each other: auto picks pmix (under mpirun/srun), then sluice-run, "
       "then a single rank. file:PATH uses a directory shared by the ranks (with "
       "SLUICE_RANK and SLUICE_SIZE).",
       [](std::string_view s, Settings& c) -> absl::Status {
         std::string v(sluice::detail::trim(s));
         if (v == "auto" || v == "pmix" || v == "sluice-run" || v == "single" ||
             (v.rfind("file:", 0) == 0 && v.size() > 5)) {
           c.boot = v;
           return absl::OkStatus();
         }
         return absl::InvalidArgumentError("not auto, pmix, sluice-run, single or file:PATH");
       },
       [](const Settings& c) { return c.boot; }},
      int_var<int>("SLUICE_RANK", "launcher", "-1",
                   "This process's rank (set by sluice-run, or by hand with SLUICE_BOOT=file).", &ProcessEnv::rank, -1,
                   (1 << 24) - 2),
      int_var<int>("SLUICE_SIZE", "launcher", "-1",
                   "Number of ranks in the job (set by sluice-run, or by hand with "
                   "SLUICE_BOOT=file).",
                   &ProcessEnv::size, -1, (1 << 24) - 1),
      int_var<int>("SLUICE_LOCAL_RANK", "launcher", "-1", "Rank among the processes on this host (set by sluice-run).",
                   &ProcessEnv::local_rank, -1, (1 << 24) - 2),
      int_var<int>("SLUICE_LOCAL_SIZE", "launcher", "-1",
                   "Number of the job's ranks on this host (set by sluice-run, or by hand with SLUICE_BOOT=file). "
                   "Equal to SLUICE_SIZE, the job is on one host and SLUICE_UCX_TCP=auto leaves UCX's TCP out.",
                   &ProcessEnv::local_size, -1, (1 << 24) - 1),
      string_var("SLUICE_BOOT_ADDR", "launcher", "path | tcp:HOST:PORT", "",
                 "Where sluice-run's bootstrap service is: its Unix socket on sluice-run's host, "
                 "tcp:HOST:PORT on the others (set by sluice-run).",
                 &ProcessEnv::boot_addr),
      string_var("SLUICE_BOOT_TOKEN", "launcher", "hex string", "",
                 "Per-job secret every bootstrap request carries (set by sluice-run).", &ProcessEnv::boot_token),
  };
}

std::vector<Field> testing_vars() {
  return {
      {"SLUICE_FAULT_AT", "testing", "NAME[:N]", "",
       "Fault tests only: the process exits at once (no goodbye, as a crash) the N-th time "
       "(default 1) it reaches the named protocol step: hello, rndv-announce, rndv-payload, "
       "rndv-land, credit-return; or, with pool-grow, every pool growth from the N-th on "
       "fails as a failed mmap would. Only the tests' library (libsluice-testing) has "
       "these points; the installed libsluice ignores the variable, with a warning.",
       [](std::string_view s, Settings& c) -> absl::Status {
         std::string v(sluice::detail::trim(s));
         SLUICE_RETURN_IF_ERROR(parse_fault_at(v).status());
         c.fault_at = v;
         return absl::OkStatus();
       },
       [](const Settings& c) { return c.fault_at; }},
  };
}

std::vector<Field> build_table() {
  std::vector<Field> all;
  for (auto part : {core_vars(), am_vars(), flow_vars(), mem_vars(), liveness_vars(), door_vars(), transport_vars(),
                    boot_vars(), testing_vars()}) {
    for (auto& f : part) all.push_back(std::move(f));
  }
  return all;
}

}  // namespace

bool ConfigVarSpec::process() const {
  std::string_view c(component);
  return c == "launcher" || c == "testing";
}

std::span<const ConfigVarSpec> config_table() {
  static const std::vector<Field> kTable = build_table();
  return kTable;
}

}  // namespace sluice::detail
