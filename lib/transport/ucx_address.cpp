// The UCX 1.13 worker address validator (ucx_address.h has the format and the rules).
#include "transport/ucx_address.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include <absl/strings/str_format.h>
#include <ucp/api/ucp_version.h>

namespace sluice::detail {
namespace {

constexpr bool kKnownUcx = UCP_API_MAJOR == 1 && UCP_API_MINOR == 13;

// UCX 1.13.1's constants (src/ucp/wireup/address.c, src/ucp/core/ucp_types.h).
constexpr std::uint8_t kHeaderDebugInfo = 0x1;
constexpr std::uint8_t kHeaderUuid = 0x2;
constexpr std::uint8_t kHeaderClientId = 0x4;
constexpr std::uint8_t kHeaderAmOnly = 0x8;
constexpr std::uint8_t kNullResource = 0xff;
constexpr std::uint8_t kMdEmptyDev = 0x80;
constexpr std::uint8_t kLast = 0x80;
constexpr std::uint8_t kDevNumPaths = 0x40;
constexpr std::uint8_t kDevSysDevice = 0x20;
constexpr std::uint8_t kDevLenMask = 0x1f;
constexpr std::uint8_t kIfaceHasEpAddr = 0x40;
constexpr std::uint8_t kIfaceLenMask = 0x3f;
constexpr int kMaxName = 31;  // UCP_WORKER_ADDRESS_NAME_MAX - 1
// Bounds UCX relies on without checking them: dev_index and md_index go through UCS_BIT() into
// 64-bit maps (wireup/select.c), sys_dev indexes a 64-entry array (core/ucp_rkey.c).
constexpr int kMaxDevices = 64;
constexpr int kMaxMds = 64;
constexpr int kMaxSysDevices = 64;
constexpr std::size_t kMaxInterfaces = 128;  // UCP_MAX_RESOURCES, which UCX checks itself
constexpr std::size_t kAttrSizeV1 = 16;
constexpr std::size_t kAttrSizeV2 = 8;
constexpr std::uint32_t kV1ReservedBits = 0x3fc00000;  // between the packed flags and atomics
constexpr std::uint16_t kV2FlagBits = 0x3ff;           // UCP_ADDR_IFACE_FLAG_* (10 of them)
constexpr std::uint16_t kV2AmSync = 0x2;               // the flag an AM lane needs of a peer
constexpr std::uint16_t kV2MinSegUnits = 4;            // 256 B: a segment UCP's headers fit in

// ucs_crc16_string (src/ucs/algorithm/crc.c): how an address names a transport.
constexpr std::uint16_t ucx_crc16(std::string_view s) {
  std::uint16_t crc = 0xffff;
  for (char c : s) {
    crc ^= static_cast<std::uint8_t>(c);
    for (int bit = 0; bit < 8; ++bit) crc = static_cast<std::uint16_t>((crc >> 1) ^ ((crc & 1) ? 0x8408 : 0));
  }
  return static_cast<std::uint16_t>(~crc);
}

template <typename T>
T load(std::string_view bytes, std::size_t at = 0) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof(T));
  return v;
}

// How a transport's device address is read (uct_iface_is_reachable, uct_ep_create).
enum class DeviceKind : std::uint8_t { kNone, kSm, kTcp, kIb };

// Each returns why `a` (an interface address) is not one the transport reads safely, or "".
std::string exact(std::string_view a, std::size_t n) {
  return a.size() == n ? "" : absl::StrFormat("is %d bytes, the transport's is %d", a.size(), n);
}
std::string iface_self(std::string_view a) { return exact(a, 8); }
std::string iface_tcp(std::string_view a) { return exact(a, 2); }
std::string iface_sysv(std::string_view a) { return exact(a, 8); }
std::string iface_posix(std::string_view a) {
  if (a.size() < 8) return exact(a, 8);
  auto seg = load<std::uint64_t>(a);
  constexpr std::uint64_t kProcfs = 1ull << 63, kShmOpen = 1ull << 62, kPidNs = 1ull << 60;
  if (!(seg & (kProcfs | kShmOpen))) return "names a segment outside /dev/shm by a path UCX would open";
  if ((seg & kPidNs) && !(seg & kProcfs)) return "has the PID namespace flag without procfs mode";
  return exact(a, (seg & kPidNs) ? 16 : 8);
}
std::string iface_cma(std::string_view a) {
  if (a.size() < 4) return exact(a, 4);
  return exact(a, (load<std::uint32_t>(a) & (1u << 31)) ? 16 : 4);  // pid, [pad, u64 PID namespace]
}
std::string iface_rc_verbs(std::string_view a) { return exact(a, 0); }
std::string iface_rc_mlx5(std::string_view a) {
  if (a.size() == 1 && static_cast<std::uint8_t>(a[0]) > 1) return "has an unknown address type";
  return exact(a, 1);
}
std::string iface_dc_mlx5(std::string_view a) {
  if (a.size() != 5) return exact(a, 5);
  auto flags = static_cast<std::uint8_t>(a[4]);  // HW_TM 1, DC_V1 2, DC_V2 4
  if ((flags & ~0x7) || ((flags & 0x6) != 0x2 && (flags & 0x6) != 0x4)) return "has bad DC flags";
  return "";
}
std::string iface_ud(std::string_view a) { return exact(a, 3); }

struct Transport {
  std::string_view name;
  std::uint16_t csum;
  DeviceKind device;
  std::string (*check_iface)(std::string_view);
};

// The transports of UCX 1.13.1 as Debian builds it (ucx_info -d; libuct_ib's five).
constexpr Transport kTransports[] = {
    {"self", ucx_crc16("self"), DeviceKind::kNone, iface_self},
    {"tcp", ucx_crc16("tcp"), DeviceKind::kTcp, iface_tcp},
    {"sysv", ucx_crc16("sysv"), DeviceKind::kSm, iface_sysv},
    {"posix", ucx_crc16("posix"), DeviceKind::kSm, iface_posix},
    {"cma", ucx_crc16("cma"), DeviceKind::kSm, iface_cma},
    {"rc_verbs", ucx_crc16("rc_verbs"), DeviceKind::kIb, iface_rc_verbs},
    {"rc_mlx5", ucx_crc16("rc_mlx5"), DeviceKind::kIb, iface_rc_mlx5},
    {"dc_mlx5", ucx_crc16("dc_mlx5"), DeviceKind::kIb, iface_dc_mlx5},
    {"ud_verbs", ucx_crc16("ud_verbs"), DeviceKind::kIb, iface_ud},
    {"ud_mlx5", ucx_crc16("ud_mlx5"), DeviceKind::kIb, iface_ud},
};

// A checksum names one transport: those of the table are distinct.
constexpr bool distinct_checksums() {
  for (const auto& a : kTransports) {
    for (const auto& b : kTransports) {
      if (&a != &b && a.csum == b.csum) return false;
    }
  }
  return true;
}
static_assert(distinct_checksums());

// Shared memory (uct_iface_local_addr_ns_t): u64 system id, [u64 IPC namespace if bit 63].
std::string device_sm(std::string_view d) {
  if (d.size() < 8) return exact(d, 8);
  return exact(d, (load<std::uint64_t>(d) >> 63) ? 16 : 8);
}

// TCP (uct_tcp_device_addr_t): u8 flags (LOOPBACK 1), u8 sa_family, then an IPv4 or IPv6
// address, or for loopback a uct_iface_local_addr_ns_t (16 B).
std::string device_tcp(std::string_view d) {
  if (d.size() < 2) return exact(d, 2);
  auto flags = static_cast<std::uint8_t>(d[0]), family = static_cast<std::uint8_t>(d[1]);
  constexpr std::uint8_t kInet = 2, kInet6 = 10;  // AF_INET, AF_INET6 on Linux
  if (flags & ~1) return "has unknown TCP device flags";
  if (family != kInet && family != kInet6) return "has an address family other than IPv4 and IPv6";
  return exact(d, (flags & 1) || family == kInet6 ? 18 : 6);
}

// InfiniBand and RoCE (uct_ib_address_t): u8 flags, then as the flags say (ib_iface.c).
std::string device_ib(std::string_view d) {
  if (d.empty()) return exact(d, 1);
  auto flags = static_cast<std::uint8_t>(d[0]);
  constexpr std::uint8_t kGidIndex = 1, kPathMtu = 2, kPkey = 4, kEth = 8, kSubnet16 = 16, kSubnet64 = 32, kIfId = 64;
  std::size_t n = 1;
  if (flags & kEth) {
    if ((flags >> 5) > 3) return "has an unknown RoCE version";  // V1, V1.5, V2, ANY
    n += 16;                                                     // the GID
  } else {
    if (flags & 0x80) return "has an unknown IB address flag";
    if ((flags & kSubnet16) && (flags & kSubnet64)) return "has both subnet prefix sizes";
    n += 2 + ((flags & kIfId) ? 8 : 0) + ((flags & kSubnet16) ? 2 : 0) + ((flags & kSubnet64) ? 8 : 0);
  }
  std::size_t mtu_at = n;
  n += ((flags & kPathMtu) ? 1 : 0) + ((flags & kGidIndex) ? 1 : 0) + ((flags & kPkey) ? 2 : 0);
  if (d.size() != n) return exact(d, n);
  if ((flags & kPathMtu) && (static_cast<std::uint8_t>(d[mtu_at]) < 1 || static_cast<std::uint8_t>(d[mtu_at]) > 5)) {
    return "has a path MTU outside IBV_MTU_256..4096";
  }
  return "";
}

std::string check_device(DeviceKind kind, std::string_view d) {
  switch (kind) {
    case DeviceKind::kNone: return exact(d, 0);
    case DeviceKind::kSm: return device_sm(d);
    case DeviceKind::kTcp: return device_tcp(d);
    case DeviceKind::kIb: return device_ib(d);
  }
  return "has an unknown kind";
}

class Parser {
 public:
  explicit Parser(std::string_view in) : in_(in) {}
  absl::StatusOr<UcxAddressInfo> run();

 private:
  absl::Status header();
  absl::Status device(bool* last);
  absl::Status interface(std::string_view dev_addr, std::size_t dev_at, bool* last);
  absl::Status attributes();
  absl::Status extended(std::uint8_t mask, const char* what, std::uint8_t* value);
  absl::Status take(std::size_t n, const char* what, std::string_view* out);
  absl::Status error(std::size_t at, std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("UCX worker address (%d B), offset %d: %s", in_.size(), at, what));
  }
  template <typename T>
  absl::Status read(const char* what, T* out) {
    std::string_view b;
    if (auto s = take(sizeof(T), what, &b); !s.ok()) return s;
    *out = load<T>(b);
    return absl::OkStatus();
  }

  std::string_view in_;
  std::size_t pos_ = 0;
  UcxAddressInfo info_;
};

absl::Status Parser::take(std::size_t n, const char* what, std::string_view* out) {
  if (in_.size() - pos_ < n) {
    return error(pos_, absl::StrFormat("the address ends inside %s (%d bytes, %d left)", what, n, in_.size() - pos_));
  }
  *out = in_.substr(pos_, n);
  pos_ += n;
  return absl::OkStatus();
}

// A 5-, 6- or 7-bit field of the byte at pos_ (flags above it): in v2, all ones means the value
// is the next byte, and UCX packs it so only when it does not fit (anything else is refused).
absl::Status Parser::extended(std::uint8_t mask, const char* what, std::uint8_t* value) {
  std::uint8_t b = 0;
  if (auto s = read(what, &b); !s.ok()) return s;
  *value = b & mask;
  if (info_.format == 1 || *value != mask) return absl::OkStatus();
  std::size_t at = pos_;
  if (auto s = read(what, value); !s.ok()) return s;
  if (*value < mask) {
    return error(at, absl::StrFormat("%s %d is extended though it fits (not canonical)", what, *value));
  }
  return absl::OkStatus();
}

absl::Status Parser::header() {
  std::uint8_t b0 = 0, flags = 0;
  if (auto s = read("the header", &b0); !s.ok()) return s;
  int version = b0 & 0x0f;
  if (version == 0) {
    info_.format = 1;
    flags = b0 >> 4;
  } else if (version == 1) {
    info_.format = 2;
    if (b0 != 1) return error(0, absl::StrFormat("a v2 header byte 0x%02x has bits besides the version", b0));
    if (auto s = read("the header", &flags); !s.ok()) return s;
    if (flags & 0xf0) return error(1, absl::StrFormat("unknown header flags 0x%02x", flags));
  } else {
    return error(0, absl::StrFormat("address version %d (first byte 0x%02x): UCX 1.13 knows v1 (0) and v2 (1) and "
                                    "aborts on any other",
                                    version, b0));
  }
  std::size_t flags_at = info_.format == 1 ? 0 : 1;
  if (flags & (kHeaderClientId | kHeaderAmOnly)) {
    return error(flags_at, "a client id or the AM-only flag: a worker address has neither");
  }
  if (!(flags & kHeaderUuid)) return error(flags_at, "no worker UUID: a worker address always has one");
  if (auto s = read("the worker UUID", &info_.worker_uuid); !s.ok()) return s;
  if (!(flags & kHeaderDebugInfo)) return absl::OkStatus();
  std::uint8_t len = 0;
  std::size_t at = pos_;
  std::string_view name;
  if (auto s = read("the worker name", &len); !s.ok()) return s;
  if (len > kMaxName) {
    return error(at, absl::StrFormat("a worker name of %d characters (UCX packs %d at most)", len, kMaxName));
  }
  if (auto s = take(len, "the worker name", &name); !s.ok()) return s;
  for (char c : name) {
    if (c < 0x20 || c > 0x7e) return error(at + 1, "a worker name with a character that is not printable ASCII");
  }
  return absl::OkStatus();
}

absl::StatusOr<UcxAddressInfo> Parser::run() {
  if (in_.empty()) return error(0, "the address is empty");
  if (auto s = header(); !s.ok()) return s;
  if (pos_ < in_.size() && static_cast<std::uint8_t>(in_[pos_]) == kNullResource) {
    ++pos_;  // no devices: UCX stops here
  } else {
    for (bool last = false; !last;) {
      if (info_.devices == kMaxDevices) return error(pos_, absl::StrFormat("more than %d devices", kMaxDevices));
      if (auto s = device(&last); !s.ok()) return s;
      ++info_.devices;
    }
  }
  if (pos_ != in_.size()) {
    return error(pos_, absl::StrFormat("%d bytes after the last device (UCX would ignore them)", in_.size() - pos_));
  }
  return std::move(info_);
}

absl::Status Parser::device(bool* last) {
  std::size_t md_at = pos_;
  if (md_at >= in_.size()) return error(md_at, "the address ends where a device begins");
  std::uint8_t md_byte = static_cast<std::uint8_t>(in_[md_at]), md = 0;
  if (auto s = extended(info_.format == 1 ? 0x1f : 0x7f, "the md index", &md); !s.ok()) return s;
  if (md_byte & kMdEmptyDev) return error(md_at, "a device without interfaces: UCX packs none");
  if (md >= kMaxMds) return error(md_at, absl::StrFormat("md index %d (UCX's md maps hold %d)", md, kMaxMds));
  std::size_t len_at = pos_;
  if (len_at >= in_.size()) return error(len_at, "the address ends before the device address length");
  std::uint8_t flags = static_cast<std::uint8_t>(in_[len_at]) & ~kDevLenMask, len = 0;
  if (auto s = extended(kDevLenMask, "the device address length", &len); !s.ok()) return s;
  *last = flags & kLast;
  if (flags & kDevNumPaths) {
    std::uint8_t paths = 0;
    if (auto s = read("the number of paths", &paths); !s.ok()) return s;
    if (paths < 2) return error(pos_ - 1, absl::StrFormat("%d paths (UCX packs the count only when above 1)", paths));
  }
  if (flags & kDevSysDevice) {
    std::uint8_t sys_dev = 0;
    if (auto s = read("the system device", &sys_dev); !s.ok()) return s;
    if (sys_dev >= kMaxSysDevices) {
      return error(pos_ - 1, absl::StrFormat("system device %d (UCX indexes %d at most)", sys_dev, kMaxSysDevices));
    }
  }
  std::size_t dev_at = pos_;
  std::string_view dev_addr;
  if (auto s = take(len, "the device address", &dev_addr); !s.ok()) return s;
  for (bool last_iface = false; !last_iface;) {
    if (auto s = interface(dev_addr, dev_at, &last_iface); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Parser::interface(std::string_view dev_addr, std::size_t dev_at, bool* last) {
  if (info_.interfaces.size() == kMaxInterfaces) {
    return error(pos_, absl::StrFormat("more than %d interfaces", kMaxInterfaces));
  }
  std::size_t at = pos_;
  std::uint16_t csum = 0;
  if (auto s = read("a transport name checksum", &csum); !s.ok()) return s;
  const Transport* tl = nullptr;
  for (const auto& t : kTransports) {
    if (t.csum == csum) tl = &t;
  }
  if (tl == nullptr) {
    return error(at,
                 absl::StrFormat("transport checksum 0x%04x is none the validator knows (self, tcp, sysv, posix, cma, "
                                 "rc_verbs, rc_mlx5, dc_mlx5, ud_verbs, ud_mlx5)",
                                 csum));
  }
  if (auto why = check_device(tl->device, dev_addr); !why.empty()) {
    return error(dev_at, absl::StrFormat("the device address of a %s interface %s", tl->name, why));
  }
  if (auto s = attributes(); !s.ok()) return s;
  std::size_t len_at = pos_;
  if (len_at >= in_.size()) return error(len_at, "the address ends before the interface address length");
  std::uint8_t flags = static_cast<std::uint8_t>(in_[len_at]) & ~kIfaceLenMask, len = 0;
  if (auto s = extended(kIfaceLenMask, "the interface address length", &len); !s.ok()) return s;
  if (flags & kIfaceHasEpAddr) return error(len_at, "endpoint addresses: a worker address has none");
  *last = flags & kLast;
  std::size_t iface_at = pos_;
  std::string_view iface_addr;
  if (auto s = take(len, "the interface address", &iface_addr); !s.ok()) return s;
  if (auto why = tl->check_iface(iface_addr); !why.empty()) {
    return error(iface_at, absl::StrFormat("the %s interface address %s", tl->name, why));
  }
  info_.interfaces.push_back({tl->name, dev_addr, iface_addr});
  if (std::find(info_.transports.begin(), info_.transports.end(), tl->name) == info_.transports.end()) {
    info_.transports.push_back(tl->name);
  }
  return absl::OkStatus();
}

// The interface's performance numbers and capability flags: finite, in range, no reserved bits.
absl::Status Parser::attributes() {
  std::size_t at = pos_;
  std::string_view a;
  if (auto s = take(info_.format == 1 ? kAttrSizeV1 : kAttrSizeV2, "the interface attributes", &a); !s.ok()) return s;
  if (info_.format == 1) {
    auto overhead = load<float>(a, 0), bandwidth = load<float>(a, 4), latency = load<float>(a, 8);
    auto bits = load<std::uint32_t>(a, 12);
    if (!std::isfinite(overhead) || overhead < 0) return error(at, "an overhead that is negative or not finite");
    if (!std::isnormal(bandwidth) || bandwidth < 0) return error(at + 4, "a bandwidth that is not a positive number");
    if (!std::isfinite(latency) || latency < 0) return error(at + 8, "a latency that is negative or not finite");
    if (bits & kV1ReservedBits) return error(at + 12, absl::StrFormat("reserved interface flags 0x%08x", bits));
    return absl::OkStatus();
  }
  // fp8 (ucs/type/float8.h): exponent 15 is NaN or infinity, 0 is zero.
  auto exponent = [&](int i) { return static_cast<std::uint8_t>(a[i]) & 0x0f; };
  if (exponent(0) == 15 || exponent(1) == 15 || exponent(2) == 15) return error(at, "a performance number that is NaN");
  if (exponent(1) == 0) return error(at + 1, "a zero bandwidth");
  auto seg_units = load<std::uint16_t>(a, 4), flags = load<std::uint16_t>(a, 6);
  if (flags & ~kV2FlagBits) return error(at + 6, absl::StrFormat("reserved interface flags 0x%04x", flags));
  if ((flags & kV2AmSync) && seg_units < kV2MinSegUnits) {
    return error(at + 4, absl::StrFormat("an active-message segment of %d bytes", seg_units * 64));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<UcxAddressInfo> parse_ucx_address(std::string_view address) {
  if (!kKnownUcx) {
    return absl::FailedPreconditionError(
        absl::StrFormat("the UCX address validator knows UCX 1.13 only; built with UCX %d.%d, it refuses every address",
                        UCP_API_MAJOR, UCP_API_MINOR));
  }
  return Parser(address).run();
}

absl::Status check_ucx_address(std::string_view address) { return parse_ucx_address(address).status(); }

}  // namespace sluice::detail
