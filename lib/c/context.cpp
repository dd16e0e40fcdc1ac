// The C API's contexts, engines, peers and progress over the C++ API.
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <sluice/config.h>

#include "c/c_api.h"

namespace sluice::capi {
namespace {

// Applies "NAME=VALUE" lines as configuration overrides and reads the configuration.
// ScopedConfigOverride is process-wide: one context is made at a time.
absl::StatusOr<Config> config_from_lines(std::string_view text) {
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  std::vector<std::unique_ptr<ScopedConfigOverride>> overrides;
  while (!text.empty()) {
    std::size_t end = std::min(text.find('\n'), text.size());
    std::string_view line = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    std::size_t eq = line.find('=');
    if (eq == std::string_view::npos || !line.starts_with("SLUICE_")) {
      return absl::InvalidArgumentError("slc_context_params.config: \"" + std::string(line) +
                                        "\" is not a NAME=VALUE line for a SLUICE_* variable");
    }
    overrides.push_back(
        std::make_unique<ScopedConfigOverride>(std::string(line.substr(0, eq)), std::string(line.substr(eq + 1))));
  }
  return Config::from_env();
}

std::int32_t create_context(const slc_context_params_t* params, slc_context_t** out) {
  if (out == nullptr) return fail(SLC_ERR_INVALID, "slc_context_create: out is NULL");
  *out = nullptr;
  if (!initialized()) return fail(SLC_ERR_NOT_INITIALIZED, "slc_context_create: call slc_init() first");
  ContextOptions options;
  if (params != nullptr) {
    if (std::int32_t s = check_mask(params->field_mask, SLC_CONTEXT_PARAM_CONFIG, "slc_context_create"); s != SLC_OK)
      return s;
    if (params->field_mask & SLC_CONTEXT_PARAM_CONFIG) {
      if (params->config == nullptr && params->config_length != 0)
        return fail(SLC_ERR_INVALID, "slc_context_create: config is NULL with a nonzero length");
      auto config =
          config_from_lines(std::string_view(params->config == nullptr ? "" : params->config, params->config_length));
      if (!config.ok()) return from_status(config.status());
      options.config = std::move(*config);
    }
  }
  auto ctx = Context::create(std::move(options));
  if (!ctx.ok()) return from_status(ctx.status());
  *out = reinterpret_cast<slc_context_t*>(ctx->release());
  return SLC_OK;
}

std::int32_t create_engine(slc_context_t* context, const slc_engine_params_t* params, slc_engine_t** out) {
  if (out == nullptr) return fail(SLC_ERR_INVALID, "slc_engine_create: out is NULL");
  *out = nullptr;
  if (context == nullptr) return fail(SLC_ERR_INVALID, "slc_engine_create: context is NULL");
  EngineOptions options;
  if (params != nullptr) {
    if (std::int32_t s = check_mask(params->field_mask, SLC_ENGINE_PARAM_NUMA_NODE, "slc_engine_create"); s != SLC_OK)
      return s;
    if (params->field_mask & SLC_ENGINE_PARAM_NUMA_NODE) {
      if (params->numa_node < 0) return fail(SLC_ERR_INVALID, "slc_engine_create: numa_node is negative");
      options.numa = NumaPolicy{.kind = NumaPolicy::Kind::kNode, .node = params->numa_node};
    }
  }
  auto engine = reinterpret_cast<Context*>(context)->create_engine(std::move(options));
  if (!engine.ok()) return from_status(engine.status());
  *out = reinterpret_cast<slc_engine_t*>(engine->release());
  return SLC_OK;
}

// The predicate of slc_engine_run_until, called as a C callback.
struct Predicate {
  slc_predicate_fn fn;
  void* user_data;
  bool operator()() const {
    CallbackScope scope;
    return fn(user_data) != 0;
  }
};

std::int32_t listen(slc_engine_t* engine, std::string_view where, const slc_listen_params_t* params,
                    std::int32_t* port) {
  ListenOptions options;
  if (params != nullptr) {
    if (std::int32_t s = check_mask(params->field_mask, SLC_LISTEN_PARAM_SHARE_PORT, "slc_engine_listen"); s != SLC_OK)
      return s;
    options.share_port = (params->field_mask & SLC_LISTEN_PARAM_SHARE_PORT) && params->share_port != 0;
  }
  auto p = engine_of(engine)->listen(where, options);
  if (!p.ok()) return from_status(p.status());
  *port = *p;
  return SLC_OK;
}

}  // namespace
}  // namespace sluice::capi

using namespace sluice;
using namespace sluice::capi;

extern "C" {

int32_t slc_context_create(const slc_context_params_t* params, slc_context_t** out) {
  return guarded([&]() -> std::int32_t { return create_context(params, out); });
}

void slc_context_destroy(slc_context_t* context) {
  guarded([&]() -> std::int32_t {
    delete reinterpret_cast<Context*>(context);
    return SLC_OK;
  });
}

int32_t slc_context_rank(const slc_context_t* context) {
  return context == nullptr ? -1 : reinterpret_cast<const Context*>(context)->rank();
}
int32_t slc_context_size(const slc_context_t* context) {
  return context == nullptr ? -1 : reinterpret_cast<const Context*>(context)->size();
}

int32_t slc_engine_create(slc_context_t* context, const slc_engine_params_t* params, slc_engine_t** out) {
  return guarded([&]() -> std::int32_t { return create_engine(context, params, out); });
}

void slc_engine_destroy(slc_engine_t* engine) {
  guarded([&]() -> std::int32_t {
    delete engine_of(engine);
    return SLC_OK;
  });
}

int32_t slc_engine_rank(const slc_engine_t* engine) { return engine == nullptr ? -1 : engine_of(engine)->rank(); }
int32_t slc_engine_size(const slc_engine_t* engine) { return engine == nullptr ? -1 : engine_of(engine)->size(); }
size_t slc_engine_eager_limit(const slc_engine_t* engine) {
  return engine == nullptr ? 0 : engine_of(engine)->eager_limit();
}

int32_t slc_engine_peer(slc_engine_t* engine, int32_t rank, slc_peer_t** out) {
  return guarded([&]() -> std::int32_t {
    if (out == nullptr) return fail(SLC_ERR_INVALID, "slc_engine_peer: out is NULL");
    *out = nullptr;
    if (engine == nullptr) return fail(SLC_ERR_INVALID, "slc_engine_peer: engine is NULL");
    Peer* p = engine_of(engine)->peer(rank);
    if (p == nullptr) return fail(SLC_ERR_INVALID, "slc_engine_peer: no such rank");
    *out = handle_of(p);
    return SLC_OK;
  });
}

int32_t slc_engine_listen(slc_engine_t* engine, const char* host_port, size_t length, const slc_listen_params_t* params,
                          int32_t* port) {
  return guarded([&]() -> std::int32_t {
    std::string_view where;
    if (engine == nullptr || port == nullptr || !text_of(host_port, length, &where))
      return fail(SLC_ERR_INVALID, "slc_engine_listen: NULL engine, port or address");
    return listen(engine, where, params, port);
  });
}

int32_t slc_engine_connect(slc_engine_t* engine, const char* host_port, size_t length, int64_t timeout_ns,
                           slc_peer_t** out) {
  return guarded([&]() -> std::int32_t {
    std::string_view where;
    if (out == nullptr) return fail(SLC_ERR_INVALID, "slc_engine_connect: out is NULL");
    *out = nullptr;
    if (engine == nullptr || !text_of(host_port, length, &where))
      return fail(SLC_ERR_INVALID, "slc_engine_connect: NULL engine or address");
    if (std::int32_t s = not_in_callback("slc_engine_connect: not inside a callback"); s != SLC_OK) return s;
    auto p = timeout_ns == 0 ? engine_of(engine)->connect(where)
                             : engine_of(engine)->connect(where, to_duration(timeout_ns));
    if (!p.ok()) return from_status(p.status());
    *out = handle_of(*p);
    return SLC_OK;
  });
}

int32_t slc_peer_rank(const slc_peer_t* peer) { return peer == nullptr ? -1 : peer_of(peer)->rank(); }
uint32_t slc_peer_id(const slc_peer_t* peer) { return peer == nullptr ? UINT32_MAX : peer_of(peer)->id(); }
int32_t slc_peer_alive(const slc_peer_t* peer) {
  return guarded([&]() -> std::int32_t { return peer != nullptr && peer_of(peer)->alive() ? 1 : 0; });
}

int32_t slc_engine_progress(slc_engine_t* engine) {
  if (engine == nullptr || callback_depth > 0) [[unlikely]]
    return fail(SLC_ERR_INVALID, "slc_engine_progress: NULL engine, or inside a callback");
  return guarded([&]() -> std::int32_t { return engine_of(engine)->progress() ? 1 : 0; });
}

int32_t slc_engine_run_until(slc_engine_t* engine, slc_predicate_fn done, void* user_data, int64_t timeout_ns) {
  return guarded([&]() -> std::int32_t {
    if (engine == nullptr || done == nullptr) return fail(SLC_ERR_INVALID, "slc_engine_run_until: NULL engine or done");
    if (std::int32_t s = not_in_callback("slc_engine_run_until: not inside a callback"); s != SLC_OK) return s;
    Predicate p{done, user_data};
    if (engine_of(engine)->run_until(std::function<bool()>(p), deadline_after(timeout_ns))) return SLC_OK;
    // run_until also returns false for a thread that does not drive the engine (logged).
    return p() ? SLC_OK : fail(SLC_ERR_DEADLINE, "slc_engine_run_until: the deadline passed (or the wrong thread)");
  });
}

int32_t slc_engine_wait(slc_engine_t* engine, int64_t timeout_ns) {
  return guarded([&]() -> std::int32_t {
    if (engine == nullptr) return fail(SLC_ERR_INVALID, "slc_engine_wait: engine is NULL");
    if (std::int32_t s = not_in_callback("slc_engine_wait: not inside a callback"); s != SLC_OK) return s;
    engine_of(engine)->wait(deadline_after(timeout_ns));
    return SLC_OK;
  });
}

int32_t slc_engine_post(slc_engine_t* engine, slc_work_fn fn, void* user_data) {
  return guarded([&]() -> std::int32_t {
    if (engine == nullptr || fn == nullptr) return fail(SLC_ERR_INVALID, "slc_engine_post: NULL engine or fn");
    engine_of(engine)->post([fn, user_data] {
      CallbackScope scope;
      fn(user_data);
    });
    return SLC_OK;
  });
}

int32_t slc_engine_barrier(slc_engine_t* engine, int64_t timeout_ns) {
  return guarded([&]() -> std::int32_t {
    if (engine == nullptr) return fail(SLC_ERR_INVALID, "slc_engine_barrier: engine is NULL");
    if (std::int32_t s = not_in_callback("slc_engine_barrier: not inside a callback"); s != SLC_OK) return s;
    return from_status(engine_of(engine)->barrier(deadline_after(timeout_ns)));
  });
}

int32_t slc_engine_release_thread(slc_engine_t* engine) {
  return guarded([&]() -> std::int32_t {
    if (engine == nullptr) return fail(SLC_ERR_INVALID, "slc_engine_release_thread: engine is NULL");
    engine_of(engine)->release_thread();
    return SLC_OK;
  });
}

}  // extern "C"
