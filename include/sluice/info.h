// sluice/info.h — what this build and this machine offer (used by sluice-info).
#pragma once

#include <string>
#include <vector>

#include <sluice/api.h>
#include <sluice/config.h>
#include <sluice/status.h>
#include <sluice/version.h>

namespace sluice {

// The library's version, "major.minor.patch" (the headers' is SLUICE_VERSION_STRING,
// <sluice/version.h>).
SLUICE_API const char* version();
// The UCX library version in use, "1.13.1".
SLUICE_API std::string ucx_version();
// NUMA nodes, CPUs, memory and RDMA devices with their nodes.
SLUICE_API absl::StatusOr<std::string> topology_report();
// The UCX transports and devices available under `config` (SLUICE_TLS applies), as UCX
// itself reports them.
SLUICE_API absl::StatusOr<std::string> transport_report(const Config& config);

// Writes a new random key for SLUICE_AUTH_KEY_FILE to `path` (64 hex digits, mode 0600); an
// existing file is never overwritten (InvalidArgument).
SLUICE_API absl::Status write_new_key_file(const std::string& path);

// The CPUs of this machine, all and per NUMA node (for launchers' binding).
struct CpuLayout {
  std::vector<int> cpus;
  std::vector<std::vector<int>> nodes;
};
SLUICE_API absl::StatusOr<CpuLayout> cpu_layout();

}  // namespace sluice
