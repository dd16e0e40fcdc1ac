// The UCX 1.13 worker address validator (lib/transport/ucx_address.h): live workers' addresses
// are accepted and connect; malformed ones, real and synthetic, are refused with a reason.
#include "transport/ucx_address.h"
#include "transport/transport.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <ucp/api/ucp.h>

namespace sluice::detail {
namespace {

using Settings = std::vector<std::pair<std::string, std::string>>;

// A UCP context (tag feature) and worker made with the UCX settings given.
class Ucx {
 public:
  explicit Ucx(const Settings& settings) {
    ucp_config_t* cfg = nullptr;
    EXPECT_EQ(ucp_config_read(nullptr, nullptr, &cfg), UCS_OK);
    for (const auto& [name, value] : settings) EXPECT_EQ(ucp_config_modify(cfg, name.c_str(), value.c_str()), UCS_OK);
    ucp_params_t p{};
    p.field_mask = UCP_PARAM_FIELD_FEATURES;
    p.features = UCP_FEATURE_TAG;
    EXPECT_EQ(ucp_init(&p, cfg, &context_), UCS_OK);
    ucp_config_release(cfg);
    ucp_worker_params_t wp{};
    EXPECT_EQ(ucp_worker_create(context_, &wp, &worker_), UCS_OK);
  }
  ~Ucx() {
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
  }

  std::string address() const {
    ucp_address_t* a = nullptr;
    std::size_t n = 0;
    EXPECT_EQ(ucp_worker_get_address(worker_, &a, &n), UCS_OK);
    std::string out(reinterpret_cast<const char*>(a), n);
    ucp_worker_release_address(worker_, a);
    return out;
  }

  // ucp_ep_create in peer error mode, some progress, and a forced close.
  ucs_status_t connect_and_close(const std::string& address) {
    ucp_ep_params_t p{};
    p.field_mask =
        UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.address = reinterpret_cast<const ucp_address_t*>(address.data());
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = [](void*, ucp_ep_h, ucs_status_t) {};
    ucp_ep_h ep = nullptr;
    ucs_status_t s = ucp_ep_create(worker_, &p, &ep);
    if (s != UCS_OK) return s;
    for (int i = 0; i < 100; ++i) ucp_worker_progress(worker_);
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* req = ucp_ep_close_nbx(ep, &rp);
    if (UCS_PTR_IS_PTR(req)) {
      while (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_worker_progress(worker_);
      ucp_request_free(req);
    }
    return UCS_OK;
  }

 private:
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
};

// Shared memory as Sluice's context sets it up (peer error mode needs the transports' own).
const Settings kSmOnly = {{"TLS", "sm"}, {"MM_ERROR_HANDLING", "y"}, {"MEMORY_INVALIDATE", "y"}};

void expect_refused(std::string_view address, std::string_view why, const std::string& what) {
  absl::Status s = check_ucx_address(address);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what << ": " << s;
  EXPECT_NE(std::string(s.message()).find(why), std::string::npos) << what << ": " << s;
  EXPECT_NE(std::string(s.message()).find("offset"), std::string::npos) << what << ": " << s;
}

TEST(UcxAddress, LiveWorkersAddressesAreAcceptedAndConnect) {
  struct Case {
    const char* what;
    Settings settings;
    int format;
    std::vector<std::string_view> transports;
  };
  const std::vector<Case> cases = {
      {"default", {}, 1, {"self", "tcp"}},
      {"sm only", kSmOnly, 1, {"sysv", "posix"}},
      {"v2", {{"ADDRESS_VERSION", "v2"}}, 2, {"self", "tcp"}},
      {"debug info", {{"ADDRESS_DEBUG_INFO", "y"}}, 1, {"self", "tcp"}},
  };
  for (const auto& c : cases) {
    Ucx ucx(c.settings);
    std::string a = ucx.address();
    auto info = parse_ucx_address(a);
    ASSERT_TRUE(info.ok()) << c.what << ": " << info.status();
    EXPECT_EQ(info->format, c.format) << c.what;
    EXPECT_GE(info->devices, 1) << c.what;
    EXPECT_GE(info->interfaces.size(), std::size_t(info->devices)) << c.what;
    for (auto t : c.transports) {
      EXPECT_NE(std::find(info->transports.begin(), info->transports.end(), t), info->transports.end()) << c.what << t;
    }
    EXPECT_EQ(ucx.connect_and_close(a), UCS_OK) << c.what;
  }
}

TEST(UcxAddress, EveryTruncationIsRefusedOrConnects) {
  for (const Settings& settings : {Settings{}, kSmOnly, Settings{{"ADDRESS_VERSION", "v2"}}}) {
    Ucx ucx(settings);
    std::string a = ucx.address();
    for (std::size_t n = 0; n < a.size(); ++n) {
      std::string prefix = a.substr(0, n);
      if (check_ucx_address(prefix).ok()) {
        EXPECT_EQ(ucx.connect_and_close(prefix), UCS_OK) << n;
      } else {
        EXPECT_FALSE(check_ucx_address(prefix).message().empty());
      }
    }
    expect_refused(a.substr(0, a.size() - 1), "the address ends inside", "last byte cut");
  }
}

TEST(UcxAddress, MalformedClassesAreRefused) {
  Ucx ucx({});
  const std::string a = ucx.address();
  expect_refused("", "empty", "empty");
  expect_refused(a.substr(0, 1), "the worker UUID", "one byte");
  for (int b = 0; b < 256; ++b) {
    std::string s = a;
    s[0] = static_cast<char>(b);
    if ((b & 0x0f) > 1) {
      expect_refused(s, "address version", "first byte " + std::to_string(b));
    } else if (check_ucx_address(s).ok()) {
      EXPECT_EQ(ucx.connect_and_close(s), UCS_OK) << b;
    }
  }
  for (std::size_t n : {1, 2, 9, 16, 215, 4096}) expect_refused(std::string(n, '\xff'), "version 15", "all 0xff");
  std::mt19937 rng(20261129);
  for (std::size_t n = 1; n <= 4096; n += 13) {
    std::string garbage(n, '\0');
    for (auto& c : garbage) c = static_cast<char>(rng());
    expect_refused(garbage, "", "garbage of " + std::to_string(n) + " B");
  }
  expect_refused(a + std::string("\0\xff", 2), "after the last device", "trailing bytes");
}

TEST(UcxAddress, SluicesContextKeepsTheFormatTheValidatorKnowsEvenWhenUnifiedModeIsAsked) {
  // Unified mode packs addresses differently; the context Sluice makes turns it off.
  ::setenv("UCX_UNIFIED_MODE", "y", 1);
  auto ctx = TransportContext::create(Config{}, ProcessEnv{}, /*ucx_tcp=*/false);
  ::unsetenv("UCX_UNIFIED_MODE");
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto worker = Worker::create(**ctx);
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_TRUE(check_ucx_address((*worker)->address()).ok()) << check_ucx_address((*worker)->address());
  EXPECT_NE((*ctx)->describe().find("UCX_UNIFIED_MODE=n"), std::string::npos);
}

// ---- synthetic addresses: each rule of the validator on its own ------------------------------

constexpr std::uint16_t crc16(std::string_view s) {
  std::uint16_t crc = 0xffff;
  for (char c : s) {
    crc ^= static_cast<std::uint8_t>(c);
    for (int i = 0; i < 8; ++i) crc = static_cast<std::uint16_t>((crc >> 1) ^ ((crc & 1) ? 0x8408 : 0));
  }
  return static_cast<std::uint16_t>(~crc);
}

template <typename T>
std::string bytes_of(T v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof v);
}

std::string v1_attrs(float overhead = 1e-8f, float bandwidth = 1e9f, float latency = 1e-7f,
                     std::uint32_t bits = 0x4f00) {
  return bytes_of(overhead) + bytes_of(bandwidth) + bytes_of(latency) + bytes_of(bits);
}
std::string v2_attrs(std::uint8_t bandwidth = 0x4a, std::uint16_t seg = 128, std::uint16_t flags = 0x3) {
  return std::string{'\x05', static_cast<char>(bandwidth), '\x03', '\x00'} + bytes_of(seg) + bytes_of(flags);
}

struct Iface {
  Iface(std::string t, std::string a) : tl(std::move(t)), addr(std::move(a)) {}
  std::string tl;
  std::string addr;
  std::uint8_t flags = 0;  // HAS_EP_ADDR; LAST is set for the last one
  std::string attrs;       // empty: a valid set for the format
};
struct Device {
  Device(std::string a, std::vector<Iface> i, int m = 0, std::uint8_t f = 0, std::string e = "")
      : addr(std::move(a)), ifaces(std::move(i)), md(m), flags(f), extra(std::move(e)) {}
  std::string addr;
  std::vector<Iface> ifaces;
  int md;
  std::uint8_t flags;  // NUM_PATHS, SYS_DEVICE; LAST is set for the last one
  std::string extra;   // num_paths and sys_dev bytes
};
struct Synthetic {
  int format = 1;
  std::uint8_t flags = 2;  // WORKER_UUID
  std::string name;
  std::vector<Device> devices;

  // A field with a v2 extension byte when it does not fit its bits.
  void field(std::string* out, int value, int mask, std::uint8_t flags) const {
    if (format == 2 && value >= mask) {
      *out += static_cast<char>(mask | flags);
      *out += static_cast<char>(value);
    } else {
      *out += static_cast<char>(value | flags);
    }
  }
  std::string bytes() const {
    std::string out = format == 1 ? std::string(1, static_cast<char>(flags << 4)) : std::string{'\x01', char(flags)};
    if (flags & 2) out += bytes_of<std::uint64_t>(0x1122334455667788);
    if (flags & 1) out += static_cast<char>(name.size()) + name;
    for (std::size_t d = 0; d < devices.size(); ++d) {
      const Device& dev = devices[d];
      field(&out, dev.md, format == 1 ? 0x1f : 0x7f, 0);
      field(&out, dev.addr.size(), 0x1f, dev.flags | (d + 1 == devices.size() ? 0x80 : 0));
      out += dev.extra + dev.addr;
      for (std::size_t i = 0; i < dev.ifaces.size(); ++i) {
        const Iface& f = dev.ifaces[i];
        out += bytes_of(crc16(f.tl));
        out += !f.attrs.empty() ? f.attrs : format == 1 ? v1_attrs() : v2_attrs();
        field(&out, f.addr.size(), 0x3f, f.flags | (i + 1 == dev.ifaces.size() ? 0x80 : 0));
        out += f.addr;
      }
    }
    return out;
  }
};

const std::string kSmDev = bytes_of<std::uint64_t>(0x0123456789abcdef);
const std::string kSmDevNs = bytes_of<std::uint64_t>(0x8123456789abcdef) + bytes_of<std::uint64_t>(42);
const std::string kTcpDev4{'\x00', '\x02', '\xc0', '\x00', '\x02', '\x01'};
const std::string kPosixIface = bytes_of<std::uint64_t>((1ull << 63) | 1234);
const std::string kIbDev = std::string{'\x04', '\x01', '\x00'} + bytes_of<std::uint16_t>(0xffff);  // LID, PKEY
const std::string kRoceDev = std::string{'\x4a'} + std::string(16, '\x01') + '\x03';               // RoCE v2, MTU

// An address of every known transport, valid for `format`.
Synthetic every_transport(int format) {
  Synthetic s;
  s.format = format;
  s.devices = {
      {"", {{"self", bytes_of<std::uint64_t>(7)}}},
      {kTcpDev4, {{"tcp", "\x12\x34"}}, 1},
      {std::string{'\x01', '\x0a'} + kSmDevNs, {{"tcp", "\x12\x34"}}, 1},  // loopback
      {kSmDev, {{"sysv", bytes_of<std::uint64_t>(99)}}, 2},
      {kSmDevNs, {{"posix", bytes_of<std::uint64_t>((1ull << 63) | (1ull << 60)) + bytes_of<std::uint64_t>(5)}}, 3},
      {kSmDev, {{"cma", bytes_of<std::uint32_t>(4321)}}, 4},
      {kIbDev, {{"rc_verbs", ""}, {"rc_mlx5", "\x01"}, {"ud_verbs", "abc"}}, 5, 0x40, "\x02"},
      {kRoceDev, {{"dc_mlx5", std::string("abc\x00\x04", 5)}, {"ud_mlx5", "abc"}}, 6, 0x20, "\x03"},
  };
  return s;
}

TEST(UcxAddress, SyntheticAddressesOfEveryTransportAreAccepted) {
  for (int format : {1, 2}) {
    auto info = parse_ucx_address(every_transport(format).bytes());
    ASSERT_TRUE(info.ok()) << format << ": " << info.status();
    EXPECT_EQ(info->devices, 8);
    EXPECT_EQ(info->interfaces.size(), 11u);
    EXPECT_EQ(info->interfaces[1].transport, "tcp");
    EXPECT_EQ(info->interfaces[1].device_address, kTcpDev4);
    EXPECT_EQ(info->interfaces[1].iface_address, "\x12\x34");
    EXPECT_EQ(info->transports.size(), 10u);
  }
  Synthetic empty;
  EXPECT_TRUE(check_ucx_address(empty.bytes() + '\xff').ok());  // no devices at all
  Synthetic named = every_transport(1);
  named.flags |= 1;
  named.name = "host:1234";
  EXPECT_TRUE(check_ucx_address(named.bytes()).ok());
  Synthetic wide = every_transport(2);  // v2: md index 63 fits its 7 bits
  wide.devices[0].md = 63;
  wide.devices[1].ifaces[0].attrs = v2_attrs(0x4a, 0, 0x1);  // no AM: a zero segment size is fine
  EXPECT_TRUE(check_ucx_address(wide.bytes()).ok()) << check_ucx_address(wide.bytes());
}

TEST(UcxAddress, SyntheticViolationsAreRefused) {
  struct Case {
    const char* what;
    int format;
    std::function<void(Synthetic&)> change;
    std::string_view why;
  };
  auto iface = [](Synthetic& s, int d) -> Iface& { return s.devices[d].ifaces[0]; };
  const std::vector<Case> cases = {
      {"client id", 1, [](Synthetic& s) { s.flags |= 4; }, "client id"},
      {"am only", 2, [](Synthetic& s) { s.flags |= 8; }, "AM-only"},
      {"no uuid", 2, [](Synthetic& s) { s.flags = 0; }, "no worker UUID"},
      {"long name", 1, [](Synthetic& s) { s.flags |= 1, s.name = std::string(32, 'a'); }, "worker name of 32"},
      {"name control", 1, [](Synthetic& s) { s.flags |= 1, s.name = "a\nb"; }, "not printable"},
      {"unknown tl", 1, [&](Synthetic& s) { iface(s, 1).tl = "cuda_ipc"; }, "transport checksum"},
      {"tcp dev short", 1, [](Synthetic& s) { s.devices[1].addr.resize(5); }, "tcp interface is 5 bytes"},
      {"tcp family", 1, [](Synthetic& s) { s.devices[1].addr[1] = 1; }, "address family"},
      {"tcp flags", 1, [](Synthetic& s) { s.devices[1].addr[0] = 2; }, "TCP device flags"},
      {"tcp loopback v4 short", 1, [](Synthetic& s) { s.devices[2].addr.resize(10); }, "is 10 bytes"},
      {"tcp iface", 1, [&](Synthetic& s) { iface(s, 1).addr = ""; }, "is 0 bytes"},
      {"self dev", 1, [](Synthetic& s) { s.devices[0].addr = "x"; }, "is 1 bytes"},
      {"self iface", 2, [&](Synthetic& s) { iface(s, 0).addr.resize(4); }, "is 4 bytes"},
      {"sm dev ns flag", 1, [](Synthetic& s) { s.devices[3].addr = kSmDevNs.substr(0, 8); }, "is 8 bytes"},
      {"sysv iface", 1, [&](Synthetic& s) { iface(s, 3).addr.resize(7); }, "is 7 bytes"},
      {"posix path", 1, [&](Synthetic& s) { iface(s, 4).addr = bytes_of<std::uint64_t>(5); }, "outside /dev/shm"},
      {"posix ns", 1, [&](Synthetic& s) { iface(s, 4).addr = kPosixIface + "x"; }, "is 9 bytes"},
      {"cma ns", 1, [&](Synthetic& s) { iface(s, 5).addr = bytes_of<std::uint32_t>(1u << 31); }, "is 4 bytes"},
      {"rc_mlx5 type", 1, [](Synthetic& s) { s.devices[6].ifaces[1].addr = "\x02"; }, "address type"},
      {"dc flags", 1, [&](Synthetic& s) { iface(s, 7).addr[4] = 6; }, "DC flags"},
      {"ib dev size", 1, [](Synthetic& s) { s.devices[6].addr += "x"; }, "is 6 bytes"},
      {"ib subnets", 1, [](Synthetic& s) { s.devices[6].addr[0] = 0x34; }, "both subnet"},
      {"ib mtu", 1, [](Synthetic& s) { s.devices[7].addr.back() = 9; }, "path MTU"},
      {"roce version", 1, [](Synthetic& s) { s.devices[7].addr[0] = '\x8a'; }, "RoCE version"},
      {"ep address", 1, [&](Synthetic& s) { iface(s, 1).flags = 0x40; }, "endpoint addresses"},
      {"empty device", 1, [](Synthetic& s) { s.devices[1].md |= 0x80, s.devices[1].ifaces.clear(); },
       "without interfaces"},
      {"md index", 2, [](Synthetic& s) { s.devices[0].md = 64; }, "md index 64"},
      {"num paths", 1, [](Synthetic& s) { s.devices[6].extra = "\x01"; }, "1 paths"},
      {"sys dev", 1, [](Synthetic& s) { s.devices[7].extra = "\x40"; }, "system device 64"},
      {"v1 reserved", 1, [&](Synthetic& s) { iface(s, 1).attrs = v1_attrs(0, 1e9f, 0, 1u << 25); }, "reserved"},
      {"v1 nan", 1, [&](Synthetic& s) { iface(s, 1).attrs = v1_attrs(0, NAN); }, "bandwidth"},
      {"v1 zero bw", 1, [&](Synthetic& s) { iface(s, 1).attrs = v1_attrs(0, 0); }, "bandwidth"},
      {"v1 negative", 1, [&](Synthetic& s) { iface(s, 1).attrs = v1_attrs(-1); }, "overhead"},
      {"v1 inf latency", 1, [&](Synthetic& s) { iface(s, 1).attrs = v1_attrs(0, 1, INFINITY); }, "latency"},
      {"v2 nan", 2, [&](Synthetic& s) { iface(s, 1).attrs = v2_attrs(0x1f); }, "NaN"},
      {"v2 zero bw", 2, [&](Synthetic& s) { iface(s, 1).attrs = v2_attrs(0x10); }, "zero bandwidth"},
      {"v2 flags", 2, [&](Synthetic& s) { iface(s, 1).attrs = v2_attrs(0x4a, 128, 0x400); }, "reserved"},
      {"v2 segment", 2, [&](Synthetic& s) { iface(s, 1).attrs = v2_attrs(0x4a, 3, 0x3); }, "segment of 192"},
  };
  for (const auto& c : cases) {
    Synthetic s = every_transport(c.format);
    c.change(s);
    expect_refused(s.bytes(), c.why, c.what);
  }
}

TEST(UcxAddress, SyntheticCountsAndExtensionsAreBounded) {
  Synthetic many;
  for (int i = 0; i < 65; ++i) many.devices.push_back({kSmDev, {{"sysv", bytes_of<std::uint64_t>(i)}}, 1});
  expect_refused(many.bytes(), "more than 64 devices", "65 devices");
  Synthetic wide;
  wide.devices.push_back({kSmDev, std::vector<Iface>(129, Iface{"sysv", bytes_of<std::uint64_t>(1)}), 1});
  expect_refused(wide.bytes(), "more than 128 interfaces", "129 interfaces");
  std::string a = every_transport(2).bytes();
  // The self device (offset 10): md 0, then a v2 md extension whose value would have fitted.
  std::string ext = a.substr(0, 10) + "\x7f\x05" + a.substr(11);
  expect_refused(ext, "not canonical", "md extension");
  std::string cut = a.substr(0, 10) + "\x7f";
  expect_refused(cut, "the md index", "md extension cut");
}

}  // namespace
}  // namespace sluice::detail
