// make_bootstrap() with the process environment already read (internal): Context::create reads
// it once for the bootstrap, the transport and the engines.
#pragma once

#include <memory>

#include <sluice/bootstrap.h>

#include "core/process_env.h"

namespace sluice::detail {

absl::StatusOr<std::unique_ptr<Bootstrap>> make_bootstrap(const Config& config, const ProcessEnv& env);

}  // namespace sluice::detail
