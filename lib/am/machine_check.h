// The checks of a configuration against this machine (internal) that Context::create makes
// before anything starts, beyond Config::validate(); sluice-info -c makes the same ones
// (sluice::check_config).
#pragma once

#include <sluice/config.h>

#include "topo/topology.h"

namespace sluice::detail {

// SLUICE_NUMA names a node `topo` has; with authentication on, SLUICE_AUTH_KEY_FILE is a key
// file the front door accepts (door::Key::load). Errors name the variable and its value.
absl::Status check_machine(const Config& config, const Topology& topo);

}  // namespace sluice::detail
