// sluice/context.h — the per-process entry point.
//
// A Context holds the configuration (SLUICE_*), the machine topology, the UCX context and the
// bootstrap (how the ranks of the job find each other). Create one per process; create
// engines from it. Each engine keeps what it uses of its context alive: the two may be
// destroyed in either order (the UCX context goes with the last of them).
//
//   auto ctx = sluice::Context::create();          // reads SLUICE_*, bootstraps
//   auto eng = (*ctx)->create_engine();            // collective in rank mode
//   (*eng)->register_handler(1, [](sluice::Message& m) { ... });
//   (*eng)->peer(1)->send(1, {}, payload);
#pragma once

#include <memory>

#include <sluice/api.h>
#include <sluice/bootstrap.h>
#include <sluice/config.h>
#include <sluice/engine.h>
#include <sluice/status.h>

namespace sluice {

namespace detail {
class ContextState;
}

struct ContextOptions {
  // Configuration to use instead of Config::from_env().
  std::optional<Config> config;
  // Bootstrap to use instead of make_bootstrap(config).
  std::unique_ptr<Bootstrap> bootstrap;
};

class SLUICE_API Context {
 public:
  // InvalidArgument for a bad SLUICE_* value (naming it), Unavailable when UCX or the
  // bootstrap cannot start.
  static absl::StatusOr<std::unique_ptr<Context>> create(ContextOptions options = {});
  ~Context();

  const Config& config() const;
  int rank() const;
  int size() const;
  Bootstrap& bootstrap();

  // Creates an engine driven by the calling thread (it may be handed to another thread before
  // its first progress()). In rank mode every rank must create its engines in the same order:
  // this publishes the engine's address and fences.
  absl::StatusOr<std::unique_ptr<Engine>> create_engine(EngineOptions options = {});

 private:
  Context() = default;
  std::shared_ptr<detail::ContextState> state_;  // shared with its engines
};

}  // namespace sluice
