// The public classes: Context, Engine, Peer, Message forward to the engine core.
#include <sluice/context.h>
#include <sluice/testing.h>

#include <absl/strings/str_format.h>

#include "am/engine_access.h"
#include "am/engine_core.h"
#include "am/machine_check.h"
#include "boot/make_bootstrap.h"
#include "core/log.h"
#include "core/tls.h"

namespace sluice {

namespace {
// A public method called on a thread that does not drive its engine returns this (or the
// Result kInvalidArgument) after EngineCore::refused() has logged it.
absl::Status wrong_thread(const char* what) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: called on a thread that does not drive the engine (see the log)", what));
}
}  // namespace

// ---- Message ---------------------------------------------------------------------------------

Message& Message::operator=(Message&& o) noexcept {
  if (this != &o) {
    release();
    s_ = std::exchange(o.s_, {});
    if (s_.borrowed) [[unlikely]]
      own_bytes();
  }
  return *this;
}

// Only a Message its handler is running with borrows: its engine is there.
void Message::own_bytes() { s_.anchor->core->delivery_.own_bytes(*this); }

void Message::release() {
  detail::MessageAnchor* anchor = s_.anchor;
  if (anchor == nullptr) return;
  if (detail::EngineCore* core = anchor->core) [[likely]] {
    core->delivery_.release(*this);
    return;
  }
  // Its engine is gone, and the memory it viewed with it: its slots keep only their
  // descriptors (the pools left them empty-handed), given back here.
  detail::clear(s_);
  if (anchor->held.fetch_sub(1, std::memory_order_acq_rel) == 1) delete anchor;
}

Peer* Message::peer() const {
  if (!valid()) return nullptr;
  if (!s_.anchor->core->guard().engine_thread("Message::peer")) [[unlikely]]
    return nullptr;
  return s_.anchor->core->peers().handle_of(s_.peer);
}

namespace {
// An answer on a Message that has no engine: logged (out of line, off the answers' path).
[[gnu::cold, gnu::noinline]] void no_engine_to_answer(const char* what) {
  SLUICE_LOG_RATE_LIMITED(kWarn, "api",
                          "%s on an empty, released or moved-from Message (or one whose engine is gone): "
                          "kInvalidArgument",
                          what);
}
}  // namespace

// The engine a Message's answer goes through, or nullptr (logged) when it has none or is
// called from a thread that does not drive it. Inline: every answer passes here.
[[gnu::always_inline]] inline detail::EngineCore* Message::answering(const char* what) const {
  if (!valid()) [[unlikely]] {
    no_engine_to_answer(what);
    return nullptr;
  }
  detail::EngineCore* core = s_.anchor->core;
  return core->guard().engine_thread(what) ? core : nullptr;
}

Result Message::reply_copy(std::span<const std::byte> header, std::span<const std::byte> payload) {
  detail::EngineCore* core = answering("Message::reply_copy");
  return core ? core->rpc_server().reply(*this, header, payload, 0) : Result::kInvalidArgument;
}

Result Message::reply(std::span<const std::byte> header, std::span<const std::byte> payload, SendCallback on_done) {
  detail::EngineCore* core = answering("Message::reply");
  return core ? core->rpc_server().reply(*this, header, payload, 0, detail::PayloadCopy::kNo, std::move(on_done))
              : Result::kInvalidArgument;
}

Result Message::reply_with_payload(std::span<const std::byte> header, SendCallback on_done) {
  detail::EngineCore* core = answering("Message::reply_with_payload");
  return core ? core->rpc_server().reply_own(*this, header, std::move(on_done)) : Result::kInvalidArgument;
}

Result Message::reply(std::span<const std::byte> header, const Slot& payload, std::size_t length,
                      SendCallback on_done) {
  detail::EngineCore* core = answering("Message::reply");
  if (core == nullptr) return Result::kInvalidArgument;
  if (!payload || length > detail::slot_size(payload)) return core->guard().bad_slot("Message::reply", payload, length);
  return core->rpc_server().reply(*this, header, std::span<const std::byte>(detail::slot_data(payload), length), 0,
                                  detail::PayloadCopy::kNo, std::move(on_done), detail::slot_memh(payload));
}

Result Message::reply_error(const absl::Status& status) {
  detail::EngineCore* core = answering("Message::reply_error");
  if (core == nullptr) return Result::kInvalidArgument;
  if (status.ok()) return core->guard().bad_status();
  std::string text(status.message());
  if (text.size() > 512) text.resize(512);
  return core->rpc_server().reply(*this, {}, std::span(reinterpret_cast<const std::byte*>(text.data()), text.size()),
                                  static_cast<std::uint16_t>(status.code()));
}

// ---- Peer ----------------------------------------------------------------------------------

bool Peer::alive() const {
  if (!engine_->guard().engine_thread("Peer::alive")) [[unlikely]]
    return false;
  return data_->state() != detail::PeerState::kDead;
}

bool Peer::can_send_now() const {
  if (!engine_->guard().engine_thread("Peer::can_send_now")) [[unlikely]]
    return false;
  return data_->can_send_now() || (data_->state() == detail::PeerState::kNew && !data_->has_waiting());
}

// Peer::send(h, header, payload, on_done) is in sender.cpp, with the send path inlined.

Result Peer::send(HandlerId h, std::span<const std::byte> header, const Slot& payload, std::size_t length,
                  SendCallback&& on_done) {
  if (!engine_->guard().engine_thread("Peer::send")) [[unlikely]]
    return Result::kInvalidArgument;
  if (!payload || length > detail::slot_size(payload)) return engine_->guard().bad_slot("Peer::send", payload, length);
  return engine_->send(*data_, h, header, std::span<const std::byte>(detail::slot_data(payload), length),
                       std::move(on_done), detail::PayloadCopy::kNo, detail::slot_memh(payload));
}

Result Peer::send_copy(HandlerId h, std::span<const std::byte> header, std::span<const std::byte> payload,
                       SendCallback&& on_done) {
  if (!engine_->guard().engine_thread("Peer::send_copy")) [[unlikely]]
    return Result::kInvalidArgument;
  return engine_->send(*data_, h, header, payload, std::move(on_done), detail::PayloadCopy::kPool);
}

Result Peer::call(HandlerId method, std::span<const std::byte> header, std::span<const std::byte> payload,
                  CallOptions options, ReplyCallback&& on_reply, CallId* id) {
  if (!engine_->guard().engine_thread("Peer::call")) [[unlikely]]
    return Result::kInvalidArgument;
  return engine_->rpc_client().call(*data_, method, header, payload, options, std::move(on_reply), id);
}

Result Peer::call_copy(HandlerId method, std::span<const std::byte> header, std::span<const std::byte> payload,
                       CallOptions options, ReplyCallback&& on_reply, CallId* id) {
  if (!engine_->guard().engine_thread("Peer::call_copy")) [[unlikely]]
    return Result::kInvalidArgument;
  return engine_->rpc_client().call(*data_, method, header, payload, options, std::move(on_reply), id,
                                    detail::PayloadCopy::kPool);
}

// ---- Engine --------------------------------------------------------------------------------

Engine::Engine(std::shared_ptr<const void> context, std::unique_ptr<detail::EngineCore> core)
    : context_(std::move(context)), core_(std::move(core)) {}
Engine::~Engine() = default;
int Engine::rank() const { return core_->rank(); }
int Engine::size() const { return core_->size(); }
int Engine::id() const { return core_->id(); }
absl::Status Engine::register_handler(HandlerId id, Handler fn, HandlerOptions options) {
  if (!core_->guard().engine_thread("Engine::register_handler")) [[unlikely]]
    return wrong_thread("Engine::register_handler");
  return core_->handlers().add(id, std::move(fn), std::move(options));
}
absl::Status Engine::unregister_handler(HandlerId id) {
  if (!core_->guard().engine_thread("Engine::unregister_handler")) [[unlikely]]
    return wrong_thread("Engine::unregister_handler");
  return core_->handlers().remove(id);
}
Peer* Engine::peer(int rank) { return core_->peers().handle(rank); }
absl::StatusOr<int> Engine::listen(std::string_view host_port) { return listen(host_port, ListenOptions{}); }
absl::StatusOr<int> Engine::listen(std::string_view host_port, ListenOptions options) {
  if (!core_->guard().engine_thread("Engine::listen")) [[unlikely]]
    return wrong_thread("Engine::listen");
  return core_->connections().listen(host_port, options.share_port);
}
absl::StatusOr<Peer*> Engine::connect(std::string_view host_port) {
  if (!core_->guard().engine_thread("Engine::connect")) [[unlikely]]
    return wrong_thread("Engine::connect");
  return core_->connections().connect(host_port, std::nullopt);
}
absl::StatusOr<Peer*> Engine::connect(std::string_view host_port, Duration timeout) {
  if (!core_->guard().engine_thread("Engine::connect")) [[unlikely]]
    return wrong_thread("Engine::connect");
  return core_->connections().connect(host_port, timeout);
}
bool Engine::progress() { return core_->progress(); }
bool Engine::run_until(const std::function<bool()>& done, Clock::time_point deadline) {
  if (!core_->guard().bind("Engine::run_until")) return false;
  // Busy-polls while there is work, and for a spin after the last of it (SLUICE_SPIN at most,
  // shorter while sleeps outlast it: detail::SpinBudget); then sleeps in wait() until a
  // message, a timer or post() wakes it. Polling threads that never sleep turn an
  // oversubscribed machine into one where each hand-off between two of them waits for a
  // scheduler time slice (measured: 1,000,000 messages between two engines beside another busy
  // job took 125 s instead of 1-2 s). The clock is read after every pass that found nothing
  // (a pass with 1,000 peers costs far more than the clock), and every 64 busy ones.
  detail::SpinBudget& spin = core_->spin();
  constexpr auto kBusy = Clock::time_point::max();
  Clock::time_point idle_since = kBusy;
  unsigned n = 0;
  while (!done()) {
    bool active = core_->progress();
    if (active) {
      idle_since = kBusy;
      if (++n % 64 != 0) continue;
    }
    Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    if (active || spin.spin() == kInfinite) continue;
    if (idle_since == kBusy) idle_since = now;
    if (now - idle_since >= spin.spin()) {
      // A wait that found work instead of sleeping says nothing of how long sleeps last.
      if (core_->wait(deadline)) spin.slept(Clock::now() - now);
      idle_since = kBusy;  // woken: spin again before the next sleep
    }
  }
  return true;
}
void Engine::wait(Clock::time_point deadline) { core_->wait(deadline); }
void Engine::post(absl::AnyInvocable<void()> fn) { core_->post(std::move(fn)); }
absl::Status Engine::barrier(Clock::time_point deadline) {
  if (!core_->guard().engine_thread("Engine::barrier")) [[unlikely]]
    return wrong_thread("Engine::barrier");
  std::uint64_t epoch = core_->barrier().enter();
  absl::Status status;
  bool done = false;
  if (!run_until(
          [&] {
            status = core_->barrier().status(epoch, &done);
            return done || !status.ok();
          },
          deadline))
    return core_->barrier().timed_out(epoch);
  return status;
}
Result Engine::submit(absl::AnyInvocable<Result()> attempt, Clock::time_point deadline) {
  return core_->submit(std::move(attempt), deadline);
}
void Engine::release_thread() { core_->guard().release(); }
void Engine::cancel(CallId id) {
  if (!core_->guard().engine_thread("Engine::cancel")) [[unlikely]]
    return;
  core_->rpc_client().cancel(id);
}
Result Engine::try_get_send_slot(std::size_t size, Slot* out) {
  if (!core_->guard().engine_thread("Engine::try_get_send_slot")) [[unlikely]]
    return Result::kInvalidArgument;
  return core_->try_get_send_slot(size, out);
}
const Stats& Engine::stats() {
  static const Stats kNone;
  if (!core_->guard().engine_thread("Engine::stats")) [[unlikely]]
    return kNone;
  return core_->stats();
}
std::vector<MethodStats> Engine::method_stats() const {
  if (!core_->guard().engine_thread("Engine::method_stats")) [[unlikely]]
    return {};
  return core_->methods().snapshot();
}
PoolStats Engine::pool_stats(Direction d) const {
  if (!core_->guard().engine_thread("Engine::pool_stats")) [[unlikely]]
    return (PoolStats{d, 0, 0, 0, {}});
  return core_->pool_stats(d);
}
std::size_t Engine::eager_limit() const { return core_->eager_limit(); }

// ---- testing.h -----------------------------------------------------------------------------

namespace testing {
std::size_t outstanding_sends(const Engine& engine) {
  detail::EngineCore* core = &detail::EngineAccess::core(engine);
  if (!core->guard().engine_thread("testing::outstanding_sends")) [[unlikely]]
    return 0;
  return detail::EngineAccess::outstanding_sends(*core);
}
std::size_t posted_exact_receives(const Engine& engine) {
  detail::EngineCore* core = &detail::EngineAccess::core(engine);
  if (!core->guard().engine_thread("testing::posted_exact_receives")) [[unlikely]]
    return 0;
  return detail::EngineAccess::posted_exact_receives(*core);
}
std::size_t receive_slots_held(const Engine& engine, int rank) {
  detail::EngineCore* core = &detail::EngineAccess::core(engine);
  if (!core->guard().engine_thread("testing::receive_slots_held")) [[unlikely]]
    return 0;
  if (rank < 0 || rank >= engine.size()) return 0;
  return detail::EngineAccess::receive_slots_held(*core, rank);
}
std::size_t watched_peers(const Engine& engine) {
  detail::EngineCore* core = &detail::EngineAccess::core(engine);
  if (!core->guard().engine_thread("testing::watched_peers")) [[unlikely]]
    return 0;
  return detail::EngineAccess::watched_peers(*core);
}
void* memh(const Slot& slot) { return slot ? detail::slot_memh(slot) : nullptr; }
}  // namespace testing

// ---- Context -------------------------------------------------------------------------------

namespace detail {
class ContextState {
 public:
  Config config;
  ProcessEnv env;  // read from the environment whatever Config the application gave
  std::unique_ptr<Topology> topo;
  std::unique_ptr<TransportContext> ucx;
  std::unique_ptr<Bootstrap> boot;
  int engines = 0;
};
}  // namespace detail

absl::StatusOr<std::unique_ptr<Context>> Context::create(ContextOptions options) {
  std::unique_ptr<Context> ctx(new Context());
  ctx->state_ = std::make_shared<detail::ContextState>();
  auto& s = *ctx->state_;
  if (options.config) {
    s.config = *options.config;
    SLUICE_RETURN_IF_ERROR(s.config.validate());
    detail::set_log_level(s.config.log_level);
  } else {
    SLUICE_ASSIGN_OR_RETURN(s.config, Config::from_env());
  }
  SLUICE_ASSIGN_OR_RETURN(s.env, detail::ProcessEnv::from_env());
  SLUICE_ASSIGN_OR_RETURN(s.topo, detail::Topology::load());
  SLUICE_RETURN_IF_ERROR(detail::check_machine(s.config, *s.topo));  // as sluice-info -c does
  if (options.bootstrap) {
    s.boot = std::move(options.bootstrap);
  } else {
    SLUICE_ASSIGN_OR_RETURN(s.boot, detail::make_bootstrap(s.config, s.env));
  }
  detail::set_log_rank(s.boot->rank());
  // UCX's TCP transport trusts whoever reaches its ports: in a job across hosts only, unless told.
  bool ucx_tcp =
      s.config.ucx_tcp == UcxTcp::kYes ||
      (s.config.ucx_tcp == UcxTcp::kAuto && detail::auto_ucx_tcp(!s.config.tls.empty() ? s.config.tls : s.env.ucx_tls,
                                                                 s.boot->size(), s.boot->local_size()));
  SLUICE_ASSIGN_OR_RETURN(s.ucx, detail::TransportContext::create(s.config, s.env, ucx_tcp));
  return ctx;
}

Context::~Context() = default;
const Config& Context::config() const { return state_->config; }
int Context::rank() const { return state_->boot->rank(); }
int Context::size() const { return state_->boot->size(); }
Bootstrap& Context::bootstrap() { return *state_->boot; }

absl::StatusOr<std::unique_ptr<Engine>> Context::create_engine(EngineOptions options) {
  auto& s = *state_;
  if (options.config) SLUICE_RETURN_IF_ERROR(options.config->validate());
  const Config& config = options.config ? *options.config : s.config;
  auto core = std::make_unique<detail::EngineCore>(config, s.topo.get(), s.ucx.get(), s.boot.get(), s.engines++);
  SLUICE_RETURN_IF_ERROR(core->init(options.numa, s.env.fault_at));
  return std::unique_ptr<Engine>(new Engine(state_, std::move(core)));
}

}  // namespace sluice
