// Configuration against this machine: the NUMA node and the key file, checked up front.
#include "am/machine_check.h"

#include "door/auth.h"

namespace sluice {
namespace detail {

absl::Status check_machine(const Config& config, const Topology& topo) {
  SLUICE_RETURN_IF_ERROR(choose_numa_node(config.numa, topo, current_cpu()).status());
  if (config.auth_mode() != AuthMode::kOff)
    SLUICE_RETURN_IF_ERROR(door::Key::load(config.auth_key_file, "SLUICE_AUTH_KEY_FILE").status());
  return absl::OkStatus();
}

}  // namespace detail

absl::Status check_config(const Config& config) {
  SLUICE_RETURN_IF_ERROR(config.validate());
  SLUICE_ASSIGN_OR_RETURN(auto topo, detail::Topology::load());
  return detail::check_machine(config, *topo);
}

}  // namespace sluice
