// A validator for packed UCX worker addresses (internal), pinned to UCX 1.13.
//
// Why: a worker address that comes from a peer (the front door's ACCEPT and CLIENT_PROOF, a
// bootstrap's exchange) is handed to ucp_ep_create(UCP_EP_PARAM_FIELD_REMOTE_ADDRESS). UCX
// 1.13.1 parses it without knowing its length and with assertions (ucp_address_unpack,
// src/ucp/wireup/address.c): a wrong first byte aborts the process (address.c:1051), a length
// field past the end reads past the buffer, and the transports then read their device and
// interface addresses as fixed structures (a tcp device address of 2 bytes is read as 18; one
// of 0 bytes is a NULL pointer). check_ucx_address reads the address as UCX 1.13.1 does, with
// the unpack flags ucp_ep_create uses (WORKER_UUID | WORKER_NAME | DEVICE_ADDR | IFACE_ADDR |
// EP_ADDR [| SYS_DEVICE]; no TL_RSC_IDX) in UCX's default non-unified mode, bounds every read
// and accepts only what ucp_worker_get_address of UCX 1.13.1 can produce.
//
// The format (host byte order; [x] only when a flag says so; `ext` a v2 extension byte, present
// when the 5/6/7-bit field before it is all ones):
//
//   v1 header, 9 B      | u8 version 0 (low nibble), flags (high nibble) | u64 worker uuid |
//   v2 header, 10 B     | u8 version 1 | u8 flags | [u64 worker uuid]                        |
//     flags: 1 DEBUG_INFO (a name follows), 2 WORKER_UUID, 4 CLIENT_ID (u64), 8 AM_ONLY
//   [name]              | u8 length | length chars |                       (DEBUG_INFO only)
//   then 0xff alone (no devices), or devices until one has LAST:
//   device              | u8 md: EMPTY 0x80, v1 ALLOC 0x40 REG 0x20, index 0x1f (v2 0x7f) [ext] |
//                       | u8 len: LAST 0x80, NUM_PATHS 0x40, SYS_DEVICE 0x20, length 0x1f [ext] |
//                       | [u8 num_paths] | [u8 sys_dev] | device address (length bytes) |
//   then interfaces until one has LAST:
//   interface           | u16 crc16(transport name) | attributes (v1 16 B, v2 8 B) |
//                       | u8 len: LAST 0x80, HAS_EP_ADDR 0x40, length 0x3f [ext] | iface address |
//     v1 attributes     | f32 overhead | f32 bandwidth | f32 latency | u32 prio (8 bits),
//                       |   iface flags (bits 8-21), atomics (bits 30, 31) |
//     v2 attributes     | fp8 overhead | fp8 bandwidth | fp8 latency | u8 prio |
//                       |   u16 seg_size / 64 | u16 flags (bits 0-9) |
//
// What it refuses (each with the offset and the reason): an empty address, a version other than
// v1/v2, header flags a worker address never has (CLIENT_ID, AM_ONLY, no WORKER_UUID), a name
// over 31 characters or not printable, any field or length past the end, bytes after the last
// device, a non-canonical v2 extension, more than 64 devices or 128 interfaces, an md index or
// system device of 64 or more, num_paths below 2, empty devices, endpoint addresses (a worker
// address has none), reserved attribute bits, NaN/infinite/negative performance numbers, a zero
// bandwidth, a v2 AM segment under 256 B; and any transport it does not know (those of UCX 1.13.1
// as Debian builds it: self, tcp, sysv, posix, cma, rc_verbs, rc_mlx5, dc_mlx5, ud_verbs,
// ud_mlx5), or a known one whose device or interface address has the wrong size or flags.
// What it cannot check: what the addresses name. A well-formed address may name any shared-memory
// segment or process of this host (UCX maps and writes it) or any TCP service (UCX 1.13.1 takes
// its reply for its own header and asserts: tcp_ep.c:1404, found by the fuzz target), so it is
// safe to connect to only as far as the peer is trusted; interfaces lists them for such checks.
// It reads UCX's default (non-unified) format, the one Sluice's UCX context always asks for
// (UCX_UNIFIED_MODE=n, in TransportContext::create).
//
// Built against a UCX other than 1.13 (UCP_API_MAJOR/MINOR), it refuses every address with
// kFailedPrecondition: the format is UCX's internal one and changes between releases.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include <absl/status/status.h>
#include <absl/status/statusor.h>

namespace sluice::detail {

// What an accepted address holds. The views point into the address given (and live as long).
struct UcxAddressInfo {
  struct Interface {
    std::string_view transport;       // "tcp", "posix", ...
    std::string_view device_address;  // as the transport packed them (a TCP one: flags, family, IP)
    std::string_view iface_address;   // (a TCP one: the port, big-endian)
  };
  int format = 0;  // UCX's address version: 1 (v1, UCX_ADDRESS_VERSION's default) or 2
  std::uint64_t worker_uuid = 0;
  int devices = 0;
  std::vector<Interface> interfaces;
  std::vector<std::string_view> transports;  // distinct transport names, in address order
};

// kOk when UCX 1.13.1's ucp_ep_create reads `address` safely (whether what it names may be
// trusted is the caller's matter: UcxAddressInfo::interfaces); else kInvalidArgument naming the
// offset and what is wrong (kFailedPrecondition when this UCX or its mode is not the one known).
absl::Status check_ucx_address(std::string_view address);
absl::StatusOr<UcxAddressInfo> parse_ucx_address(std::string_view address);

}  // namespace sluice::detail
