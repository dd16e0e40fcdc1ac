// Writes the seed corpus of the UCX address fuzz target (tests/fuzz/ucx_address_corpus): the
// addresses of live workers under several UCX_TLS and address settings, and malformed ones made
// from them. Their TCP interfaces listen on the port the fuzz target's peer takes again
// (kPeerPort there), so on this host those seeds reach a live peer. A tool run by hand when the corpus is remade, not
// part of the build:
//   c++ -std=c++20 tests/fuzz/ucx_address_seeds.cpp $(pkg-config --cflags --libs ucx) -o /tmp/seeds
//   /tmp/seeds tests/fuzz/ucx_address_corpus
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>

#include <ucp/api/ucp.h>

namespace {

// The fuzz target's peer port (kPeerPort in ucx_address_fuzz.cpp), for contexts with TCP.
constexpr std::pair<const char*, const char*> kPort = {"PORT_RANGE", "29613"};

// The address of a worker of a context made with the UCX settings given (name, value pairs).
std::string live_address(std::initializer_list<std::pair<const char*, const char*>> settings) {
  ucp_config_t* cfg = nullptr;
  if (ucp_config_read(nullptr, nullptr, &cfg) != UCS_OK) std::exit(1);
  for (auto [name, value] : settings) {
    if (ucp_config_modify(cfg, name, value) != UCS_OK) std::exit(1);
  }
  ucp_params_t p{};
  p.field_mask = UCP_PARAM_FIELD_FEATURES;
  p.features = UCP_FEATURE_TAG;
  ucp_context_h ctx = nullptr;
  ucp_worker_h w = nullptr;
  if (ucp_init(&p, cfg, &ctx) != UCS_OK) std::exit(1);
  ucp_config_release(cfg);
  ucp_worker_params_t wp{};
  if (ucp_worker_create(ctx, &wp, &w) != UCS_OK) std::exit(1);
  ucp_address_t* a = nullptr;
  std::size_t n = 0;
  if (ucp_worker_get_address(w, &a, &n) != UCS_OK) std::exit(1);
  std::string out(reinterpret_cast<const char*>(a), n);
  ucp_worker_release_address(w, a);
  ucp_worker_destroy(w);
  ucp_cleanup(ctx);
  return out;
}

void put(const std::string& dir, const char* name, const std::string& bytes) {
  std::string path = dir + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::exit(1);
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  std::string dir = argv[1];
  std::string def = live_address({kPort});
  put(dir, "real_v1_default_tls", def);
  put(dir, "real_v1_tls_sm", live_address({{"TLS", "sm"}}));
  put(dir, "real_v1_tls_tcp", live_address({{"TLS", "tcp"}, kPort}));
  put(dir, "real_v1_tls_self_sysv_posix_cma", live_address({{"TLS", "self,sysv,posix,cma"}}));
  put(dir, "real_v1_debug_info_name", live_address({{"ADDRESS_DEBUG_INFO", "y"}, kPort}));
  std::string v2 = live_address({{"ADDRESS_VERSION", "v2"}, kPort});
  put(dir, "real_v2_default_tls", v2);
  put(dir, "one_byte", def.substr(0, 1));
  put(dir, "truncated_in_uuid", def.substr(0, 5));
  put(dir, "truncated_after_header", def.substr(0, 9));
  put(dir, "truncated_in_first_device", def.substr(0, 14));
  put(dir, "truncated_mid_address", def.substr(0, def.size() / 2));
  put(dir, "truncated_last_byte", def.substr(0, def.size() - 1));
  put(dir, "truncated_v2_mid_address", v2.substr(0, v2.size() / 2));
  put(dir, "trailing_garbage", def + std::string("\x00\xff\x42\x13", 4));
  std::string flipped = def;
  flipped[0] = static_cast<char>(flipped[0] ^ 0x02);  // version 2: UCX 1.13 asserts
  put(dir, "first_byte_version_2", flipped);
  flipped[0] = '\xff';
  put(dir, "first_byte_ff", flipped);
  put(dir, "all_ff_16", std::string(16, '\xff'));
  put(dir, "all_ff_4096", std::string(4096, '\xff'));
  put(dir, "no_devices", def.substr(0, 9) + "\xff");
  std::mt19937 rng(20261129);
  std::string garbage(4096, '\0');
  for (auto& c : garbage) c = static_cast<char>(rng());
  put(dir, "garbage_4096", garbage);
  put(dir, "garbage_37", garbage.substr(0, 37));
  return 0;
}
