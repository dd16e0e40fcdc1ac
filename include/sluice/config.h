// sluice/config.h — Sluice's configuration: every SLUICE_* variable, parsed once.
//
// Model: Config::from_env() reads the environment (plus scoped test overrides) once, checks
// each value and the relations between them, and returns a typed struct; nothing in Sluice
// reads the environment afterwards. Context::create() calls it; applications may build a
// Config themselves, change fields in code, and pass it in ContextOptions.
//
// Units: sizes accept 512, 8K, 4M, 1G (powers of 1024; a trailing B or iB is allowed);
// durations accept 500ns, 10us, 5ms, 2s, 1m; `auto` and `inf` where a variable says so.
// Booleans accept y/n/yes/no/1/0/on/off/true/false.
//
// `sluice-info -c -f` prints every variable with its current value, default and doc;
// docs/configuration.md is the same table.
//
// Thread safety: Config is a plain value. from_env() may be called from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sluice/api.h>
#include <sluice/status.h>

namespace sluice {

enum class LogLevel : int { kError = 0, kWarn, kInfo, kDebug, kTrace };
enum class HugePages : int { kNo, kTry, kYes };
// Authentication of client/server connections (SLUICE_AUTH); kAuto: kRequired when a key
// file is set, kOff otherwise (Config::auth_mode() resolves it).
enum class AuthMode : int { kAuto, kOff, kOptional, kRequired };
// Whether UCX may use TCP (SLUICE_UCX_TCP): its TCP transport listens on every interface and
// trusts whoever sends its magic (docs/security.md). kAuto: in rank mode only.
enum class UcxTcp : int { kAuto, kYes, kNo };
// Encryption of the stream transport (SLUICE_ENCRYPT): client/server peers on other hosts.
enum class Encrypt : int { kOff, kOn };
// Which transport carries a client/server peer (SLUICE_CS_TRANSPORT): kAuto: UCX over shared
// memory when it reaches the peer (same host), else Sluice's stream; kStream: always the stream.
enum class CsTransport : int { kAuto, kStream };

// Where an engine's pools live (SLUICE_NUMA).
struct NumaPolicy {
  enum class Kind { kAuto, kNic, kNode };
  Kind kind = Kind::kAuto;
  int node = -1;  // with kNode
};

using Duration = std::chrono::nanoseconds;
inline constexpr Duration kInfinite = Duration::max();

// When an engine writes its counters as a JSON line (SLUICE_STATS_TRIGGER; docs/stats.md).
struct StatsTrigger {
  bool at_exit = false;  // exit: when the engine is destroyed
  int signal = 0;        // signal:USR1 or signal:USR2: whenever the process gets it (0: none)
  Duration every{0};     // timer:DURATION: every DURATION (0: never)
  bool any() const { return at_exit || signal != 0 || every.count() != 0; }
};

struct SLUICE_API Config {
  // core
  LogLevel log_level = LogLevel::kWarn;
  bool stats = false;
  StatsTrigger stats_trigger;         // none by default
  std::string stats_dest = "stderr";  // stderr | file:PATH (%p: pid, %h: host name)
  // am: eager / rendezvous
  std::optional<std::size_t> eager_max;  // nullopt: auto, chosen from the transports
  bool rndv = true;
  bool coalesce = true;  // queued small messages to one peer leave in one tagged message
  std::size_t max_message = std::size_t{1} << 30;
  // flow
  std::uint32_t credits = 32;
  std::uint32_t credits_max = 128;  // a peer's grant grows by demand up to max(this, credits)
  std::uint32_t rx_posted = 8;
  std::uint32_t send_queue_max = 4096;
  std::uint32_t rpc_window = 32;
  std::uint32_t rpc_window_max = 128;  // a client's window grows by demand up to max(this, rpc_window)
  // mem
  std::size_t send_pool_max = std::size_t{256} << 20;
  std::size_t recv_pool_max = std::size_t{256} << 20;
  std::size_t pool_chunk = std::size_t{2} << 20;
  std::vector<std::size_t> pool_classes = {std::size_t{64} << 10, std::size_t{1} << 20, std::size_t{4} << 20};
  HugePages hugepages = HugePages::kTry;
  NumaPolicy numa;
  // liveness
  Duration peer_timeout = std::chrono::seconds(10);
  Duration heartbeat = std::chrono::seconds(1);
  std::uint32_t heartbeat_rate = 250;  // heartbeats per second at most, spread over the peers
  Duration connect_timeout = std::chrono::seconds(10);
  Duration call_warn = std::chrono::seconds(30);  // a call without a timeout outstanding this long is logged
  // progress
  Duration spin = std::chrono::microseconds(100);  // run_until() busy-polls this long idle
  // client/server mode: the front door
  AuthMode auth = AuthMode::kAuto;
  std::string auth_key_file;  // SLUICE_AUTH_KEY_FILE: the path, never the key
  Duration handshake_timeout = std::chrono::seconds(3);
  std::uint32_t handshake_max = 64;
  Encrypt encrypt = Encrypt::kOff;
  CsTransport cs_transport = CsTransport::kAuto;
  // transport
  std::string tls;  // empty: UCX's own choice
  UcxTcp ucx_tcp = UcxTcp::kAuto;
  // boot
  std::string boot = "auto";

  // Reads and checks every SLUICE_* variable. Errors (InvalidArgument) name the variable,
  // the value and what is allowed. The launcher's variables (SLUICE_RANK, SLUICE_SIZE,
  // SLUICE_LOCAL_RANK, SLUICE_BOOT_ADDR, SLUICE_BOOT_TOKEN) and the tests' SLUICE_FAULT_AT are
  // checked here too but are not fields: they describe the process, not a choice of the
  // application's, and the library reads them itself whatever Config it is given. Unknown
  // SLUICE_* variables are warned about once per process, with the closest known name.
  static absl::StatusOr<Config> from_env();

  // Cross-field checks (eager limit against slot sizes, pool maxima against chunks).
  absl::Status validate() const;

  // SLUICE_AUTH with kAuto resolved: kRequired when SLUICE_AUTH_KEY_FILE is set, else kOff.
  AuthMode auth_mode() const;

  // The eager limit in bytes, `auto` resolved for the given transports (8 KiB today).
  std::size_t eager_limit() const;
};

// Checks `config` as Context::create() does before anything starts: validate(), then against
// this machine: SLUICE_NUMA names a NUMA node it has, and with authentication on,
// SLUICE_AUTH_KEY_FILE is a key file Sluice accepts (readable, private, 16 bytes to 4 KiB).
// Errors (InvalidArgument) name the variable and its value. sluice-info -c runs it.
SLUICE_API absl::Status check_config(const Config& config);

// One configuration variable, for printing (sluice-info -c).
struct ConfigVar {
  std::string name;
  std::string component;  // core, mem, flow, am, transport, boot, launcher, test
  std::string type;       // "size", "duration", "bool", "int [2, 65535]", "enum: a|b|c", ...
  std::string default_value;
  std::string doc;
  std::string value;  // current value, formatted
};

// Every variable with the value it has in `config`.
SLUICE_API std::vector<ConfigVar> describe(const Config& config);

// Test helper: makes `name` read as `value` (or as unset, with nullopt) for Config::from_env()
// until destroyed, then restores the previous state. Never touches the process environment.
class SLUICE_API ScopedConfigOverride {
 public:
  ScopedConfigOverride(std::string name, std::optional<std::string> value);
  ~ScopedConfigOverride();
  ScopedConfigOverride(const ScopedConfigOverride&) = delete;
  ScopedConfigOverride& operator=(const ScopedConfigOverride&) = delete;

 private:
  std::string name_;
  bool had_previous_;
  std::optional<std::string> previous_;
};

// Parsers, exposed for tests and tools. Errors are InvalidArgument with a short reason.
SLUICE_API absl::StatusOr<std::size_t> parse_size(std::string_view text);
SLUICE_API absl::StatusOr<Duration> parse_duration(std::string_view text);
SLUICE_API absl::StatusOr<bool> parse_bool(std::string_view text);
SLUICE_API std::string format_size(std::size_t bytes);
SLUICE_API std::string format_duration(Duration d);

}  // namespace sluice
