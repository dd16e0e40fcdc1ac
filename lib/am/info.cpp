#include <sluice/info.h>

#include "door/auth.h"
#include "sluice_build_config.h"
#include "topo/topology.h"
#include "transport/transport.h"
#include "transport/ucx.h"

namespace sluice {

const char* version() { return SLUICE_VERSION; }

absl::StatusOr<std::string> topology_report() {
  SLUICE_ASSIGN_OR_RETURN(auto topo, detail::Topology::load());
  return topo->report();
}

absl::StatusOr<CpuLayout> cpu_layout() {
  SLUICE_ASSIGN_OR_RETURN(auto topo, detail::Topology::load());
  CpuLayout out;
  out.cpus = topo->cpus();
  for (const auto& n : topo->nodes()) out.nodes.push_back(n.cpus);
  return out;
}

std::string ucx_version() { return detail::ucx_library_version(); }

absl::Status write_new_key_file(const std::string& path) { return detail::door::write_new_key(path); }

absl::StatusOr<std::string> transport_report(const Config& config) {
  SLUICE_ASSIGN_OR_RETURN(detail::ProcessEnv env, detail::ProcessEnv::from_env());
  SLUICE_ASSIGN_OR_RETURN(auto ctx, detail::TransportContext::create(config, env));
  return ctx->describe();
}

}  // namespace sluice
