// sluice-info: what Sluice is configured to do and what this machine offers (like ucx_info).
//
//   sluice-info -c [-f] [--markdown]   configuration variables (-f: with type, default, doc)
//   sluice-info -t                     topology: NUMA nodes, CPUs, memory, RDMA devices
//   sluice-info -d                     UCX transports and devices
//   sluice-info -v                     versions
//   sluice-info --new-key FILE         write a new random key for SLUICE_AUTH_KEY_FILE
// Exit status: 0 success, 1 configuration error (-c: also NUMA node, key file), 2 bad arguments.
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include <sluice/config.h>
#include <sluice/info.h>

namespace {

void usage(FILE* out) {
  std::fprintf(out,
               "usage: sluice-info [-c [-f] [--markdown]] [-t] [-d] [-v] [--new-key FILE] [-h]\n"
               "Prints what Sluice is configured to do and what this machine offers it, like\n"
               "ucx_info. Every SLUICE_* variable is read and checked as an engine would: a bad\n"
               "value is reported, naming the variable and what it allows. With -c, also what\n"
               "Context::create checks against this machine: the NUMA node, the key file.\n"
               "\n"
               "options:\n"
               "  -c              print every SLUICE_* variable with its current value\n"
               "  -f              with -c: also its type, default and documentation\n"
               "  --markdown      with -c: print the variables as a markdown table\n"
               "  -t              print the topology (NUMA nodes, CPUs, RDMA devices)\n"
               "  -d              print the UCX transports and devices, and the UCX settings Sluice makes\n"
               "  -v              print the Sluice and UCX versions (and check that the library and\n"
               "                  the headers it was built with agree)\n"
               "  --new-key FILE  write a new random key for SLUICE_AUTH_KEY_FILE (mode 600;\n"
               "                  an existing file is left alone)\n"
               "  -h, --help      print this help\n"
               "\n"
               "exit status:\n"
               "  0               success\n"
               "  1               a configuration error (a bad SLUICE_* value, or with -c one this\n"
               "                  machine refuses), or -v found a mismatch\n"
               "  2               bad arguments\n"
               "\n"
               "examples:\n"
               "  SLUICE_CREDITS=64 sluice-info -c\n"
               "  sluice-info -c -f | less\n");
}

std::string md_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else out += c;
  }
  return out;
}

void print_config(const sluice::Config& config, bool full, bool markdown) {
  auto vars = sluice::describe(config);
  if (markdown) {
    std::printf("| variable | component | type | default | description |\n");
    std::printf("|---|---|---|---|---|\n");
    for (const auto& v : vars) {
      std::printf("| `%s` | %s | %s | `%s` | %s |\n", v.name.c_str(), v.component.c_str(), md_escape(v.type).c_str(),
                  v.default_value.empty() ? " " : md_escape(v.default_value).c_str(), md_escape(v.doc).c_str());
    }
    return;
  }
  for (const auto& v : vars) {
    if (full) {
      std::printf("#\n# %s\n#\n# type:    %s\n# default: %s\n#\n", v.doc.c_str(), v.type.c_str(),
                  v.default_value.c_str());
    }
    std::printf("%s=%s\n", v.name.c_str(), v.value.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool config = false, full = false, markdown = false, topo = false, devices = false, versions = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "-c") config = true;
    else if (a == "-f") full = true;
    else if (a == "--markdown") markdown = true;
    else if (a == "-t") topo = true;
    else if (a == "-d") devices = true;
    else if (a == "-v") versions = true;
    else if (a == "--new-key") {
      if (i + 1 >= argc || argc != 3) {
        std::fprintf(stderr, "sluice-info: --new-key takes a file name, and nothing else\n");
        usage(stderr);
        return 2;
      }
      if (auto s = sluice::write_new_key_file(argv[i + 1]); !s.ok()) {
        std::fprintf(stderr, "sluice-info: %s\n", std::string(s.message()).c_str());
        return 1;
      }
      std::printf("sluice-info: wrote a new key to %s; give servers and clients SLUICE_AUTH_KEY_FILE=%s\n", argv[i + 1],
                  argv[i + 1]);
      return 0;
    } else if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else {
      std::fprintf(stderr, "sluice-info: unknown argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  if (!(config || topo || devices || versions)) {
    if (full || markdown) {
      std::fprintf(stderr, "sluice-info: -f and --markdown go with -c\n");
      usage(stderr);
      return 2;
    }
    versions = topo = true;
  }
  auto cfg = sluice::Config::from_env();
  // With -c, also what Context::create checks against this machine (NUMA node, key file).
  absl::Status checked = !cfg.ok() ? cfg.status() : config ? sluice::check_config(*cfg) : absl::OkStatus();
  if (!checked.ok()) {
    std::fprintf(stderr, "sluice-info: configuration error: %s\n", std::string(checked.message()).c_str());
    return 1;
  }
  if (versions) {
    std::printf("# Sluice %s (headers %s), UCX %s\n", sluice::version(), SLUICE_VERSION_STRING,
                sluice::ucx_version().c_str());
    if (std::string_view(sluice::version()) != SLUICE_VERSION_STRING) {
      std::fprintf(stderr, "sluice-info: the Sluice library loaded is %s, these tools were built against %s\n",
                   sluice::version(), SLUICE_VERSION_STRING);
      return 1;
    }
  }
  if (config) print_config(*cfg, full, markdown);
  if (topo) {
    auto r = sluice::topology_report();
    if (!r.ok()) {
      std::fprintf(stderr, "sluice-info: %s\n", std::string(r.status().message()).c_str());
      return 1;
    }
    std::fputs(r->c_str(), stdout);
  }
  if (devices) {
    auto r = sluice::transport_report(*cfg);
    if (!r.ok()) {
      std::fprintf(stderr, "sluice-info: %s\n", std::string(r.status().message()).c_str());
      return 1;
    }
    std::fputs(r->c_str(), stdout);
  }
  return 0;
}
