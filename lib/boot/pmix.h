// PMIx bootstrap (internal): the only file that includes PMIx.
#pragma once

#include <memory>

#include <sluice/bootstrap.h>

namespace sluice::detail {

// True when a PMIx launcher started this process (PMIX_RANK and PMIX_NAMESPACE are set).
bool pmix_available_from_environment();
absl::StatusOr<std::unique_ptr<Bootstrap>> make_pmix_bootstrap(const Config& config);

}  // namespace sluice::detail
