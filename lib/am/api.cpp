// The public classes: Context, Engine, Peer, Message forward to the engine core.
#include <sluice/context.h>

#include <absl/strings/str_format.h>

#include "am/engine_core.h"
#include "core/log.h"

namespace sluice {

// ---- Message ---------------------------------------------------------------------------------

Message::Message(Message&& o) noexcept { *this = std::move(o); }

Message& Message::operator=(Message&& o) noexcept {
  if (this == &o) return *this;
  release();
  engine_ = o.engine_;
  peer_ = o.peer_;
  source_ = o.source_;
  incarnation_ = o.incarnation_;
  handler_ = o.handler_;
  request_ = o.request_;
  replied_ = o.replied_;
  credit_ = o.credit_;
  rpc_id_ = o.rpc_id_;
  reply_capacity_ = o.reply_capacity_;
  reply_buf_ = o.reply_buf_;
  holds_rpc_slot_ = o.holds_rpc_slot_;
  reply_flag_ = o.reply_flag_;
  status_ = o.status_;
  seq_ = o.seq_;
  announced_ = o.announced_;
  slot_ = std::move(o.slot_);
  landing_ = std::move(o.landing_);
  heap_ = std::move(o.heap_);
  header_ = o.header_;
  payload_ = o.payload_;
  borrowed_ = o.borrowed_;
  lender_ = o.lender_;
  sink_landing_ = o.sink_landing_;
  o.sink_landing_ = false;
  o.engine_ = nullptr;
  o.header_ = {};
  o.payload_ = {};
  o.borrowed_ = false;
  o.lender_ = nullptr;
  if (borrowed_) engine_->own_bytes(*this);  // it outlives the handler: its bytes must too
  return *this;
}

void Message::release() {
  if (engine_ != nullptr) engine_->release(*this);
  slot_.release();
  landing_.release();
  heap_.reset();
  header_ = {};
  payload_ = {};
  borrowed_ = false;  // released: nothing left to own when it is moved
  lender_ = nullptr;
}

Peer* Message::peer() const { return engine_ ? engine_->peer_handle(peer_) : nullptr; }

Result Message::reply_copy(std::span<const std::byte> header, std::span<const std::byte> payload) {
  if (engine_ == nullptr) return Result::kInvalidArgument;
  return engine_->reply(*this, header, payload, 0);
}

Result Message::reply(std::span<const std::byte> header, std::span<const std::byte> payload, SendCallback on_done) {
  if (engine_ == nullptr) return Result::kInvalidArgument;
  return engine_->reply(*this, header, payload, 0, detail::PayloadCopy::kNo, std::move(on_done));
}

Result Message::reply_with_payload(std::span<const std::byte> header, SendCallback on_done) {
  if (engine_ == nullptr) return Result::kInvalidArgument;
  return engine_->reply_own(*this, header, std::move(on_done));
}

Result Message::reply(std::span<const std::byte> header, const Slot& payload, std::size_t length,
                      SendCallback on_done) {
  if (engine_ == nullptr || !payload || length > payload.size()) return Result::kInvalidArgument;
  return engine_->reply(*this, header, std::span<const std::byte>(payload.data(), length), 0, detail::PayloadCopy::kNo,
                        std::move(on_done), payload.memh());
}

Result Message::reply_error(const absl::Status& status) {
  if (engine_ == nullptr || status.ok()) return Result::kInvalidArgument;
  std::string text(status.message());
  if (text.size() > 512) text.resize(512);
  return engine_->reply(*this, {}, std::span(reinterpret_cast<const std::byte*>(text.data()), text.size()),
                        static_cast<std::uint16_t>(status.code()));
}

// ---- Peer ----------------------------------------------------------------------------------

bool Peer::alive() const { return data_->state != detail::PeerState::kDead; }

Result Peer::send(HandlerId h, std::span<const std::byte> header, std::span<const std::byte> payload,
                  SendCallback on_done) {
  return engine_->send(*data_, h, header, payload, std::move(on_done), detail::PayloadCopy::kNo);
}

Result Peer::send(HandlerId h, std::span<const std::byte> header, const Slot& payload, std::size_t length,
                  SendCallback on_done) {
  if (!payload || length > payload.size()) return Result::kInvalidArgument;
  return engine_->send(*data_, h, header, std::span<const std::byte>(payload.data(), length), std::move(on_done),
                       detail::PayloadCopy::kNo, payload.memh());
}

Result Peer::send_copy(HandlerId h, std::span<const std::byte> header, std::span<const std::byte> payload,
                       SendCallback on_done) {
  return engine_->send(*data_, h, header, payload, std::move(on_done), detail::PayloadCopy::kPool);
}

Result Peer::call(HandlerId method, std::span<const std::byte> header, std::span<const std::byte> payload,
                  CallOptions options, ReplyCallback on_reply, CallId* id) {
  return engine_->call(*data_, method, header, payload, options, std::move(on_reply), id);
}

// ---- Engine --------------------------------------------------------------------------------

Engine::Engine(std::unique_ptr<detail::EngineCore> core) : core_(std::move(core)) {}
Engine::~Engine() = default;
int Engine::rank() const { return core_->rank(); }
int Engine::size() const { return core_->size(); }
int Engine::id() const { return core_->id(); }
absl::Status Engine::register_handler(HandlerId id, Handler fn, HandlerOptions options) {
  return core_->register_handler(id, std::move(fn), std::move(options));
}
absl::Status Engine::unregister_handler(HandlerId id) { return core_->unregister_handler(id); }
Peer* Engine::peer(int rank) { return core_->peer(rank); }
absl::StatusOr<int> Engine::listen(std::string_view host_port) { return core_->listen(host_port); }
absl::StatusOr<Peer*> Engine::connect(std::string_view host_port) { return core_->connect(host_port); }
bool Engine::progress() { return core_->progress(); }
bool Engine::run_until(const std::function<bool()>& done, Clock::time_point deadline) {
  // Busy-polls while there is work, and for SLUICE_SPIN after the last of it; then sleeps in
  // wait() until a message, a timer or post() wakes it. Polling threads that never sleep
  // turn an oversubscribed machine into one where each hand-off between two of them waits
  // for a scheduler time slice (measured: 1,000,000 messages between two engines beside
  // another busy job took 125 s instead of 1-2 s). The clock is read every 64 calls.
  const Duration spin = core_->spin();
  constexpr auto kBusy = Clock::time_point::max();
  Clock::time_point idle_since = kBusy;
  bool active = false;
  unsigned n = 0;
  while (!done()) {
    active = core_->progress() || active;
    if (++n % 64 != 0) continue;
    Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    if (active || spin == kInfinite) {
      active = false;
      idle_since = kBusy;
    } else if (idle_since == kBusy) {
      idle_since = now;
    } else if (now - idle_since >= spin) {
      core_->wait(deadline);
      idle_since = kBusy;  // woken: spin again before the next sleep
    }
  }
  return true;
}
void Engine::wait(Clock::time_point deadline) { core_->wait(deadline); }
void Engine::post(std::function<void()> fn) { core_->post(std::move(fn)); }
void Engine::cancel(CallId id) { core_->cancel(id); }
Result Engine::try_get_send_slot(std::size_t size, Slot* out) { return core_->try_get_send_slot(size, out); }
const Stats& Engine::stats() { return core_->stats(); }
PoolStats Engine::pool_stats(Direction d) const { return core_->pool_stats(d); }
std::size_t Engine::outstanding_sends() const { return core_->outstanding_sends(); }
std::size_t Engine::posted_exact_receives() const { return core_->posted_exact_receives(); }
std::size_t Engine::eager_limit() const { return core_->eager_limit(); }

// ---- Context -------------------------------------------------------------------------------

namespace detail {
class ContextState {
 public:
  Config config;
  std::unique_ptr<Topology> topo;
  std::unique_ptr<TransportContext> ucx;
  std::unique_ptr<Bootstrap> boot;
  int engines = 0;
};
}  // namespace detail

absl::StatusOr<std::unique_ptr<Context>> Context::create(ContextOptions options) {
  std::unique_ptr<Context> ctx(new Context());
  ctx->state_ = std::make_unique<detail::ContextState>();
  auto& s = *ctx->state_;
  if (options.config) {
    s.config = *options.config;
    SLUICE_RETURN_IF_ERROR(s.config.validate());
    detail::set_log_level(s.config.log_level);
  } else {
    SLUICE_ASSIGN_OR_RETURN(s.config, Config::from_env());
  }
  SLUICE_ASSIGN_OR_RETURN(s.topo, detail::Topology::load());
  if (options.bootstrap) {
    s.boot = std::move(options.bootstrap);
  } else {
    SLUICE_ASSIGN_OR_RETURN(s.boot, make_bootstrap(s.config));
  }
  detail::set_log_rank(s.boot->rank());
  SLUICE_ASSIGN_OR_RETURN(s.ucx, detail::TransportContext::create(s.config));
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
  SLUICE_RETURN_IF_ERROR(core->init(options.numa_node));
  return std::unique_ptr<Engine>(new Engine(std::move(core)));
}

}  // namespace sluice
