// Key-value blobs exchanged at fences (internal), and the sluice-run service protocol.
//
// Blob: repeated { u32 key length, key, u32 value length, value }, little-endian.
// Service request: u32 length, then "<token> FENCE <rank> <epoch>\n" and the rank's blob.
// Service reply:   u32 length, then "OK\n" and, per rank, { u32 rank, u32 length, blob },
//                  or "ERR <reason>\n".
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include <sluice/status.h>

namespace sluice::detail {

using KvMap = std::map<std::string, std::string, std::less<>>;

inline constexpr std::size_t kMaxBootMessage = std::size_t{16} << 20;

std::string encode_kv(const KvMap& kv);
absl::StatusOr<KvMap> decode_kv(std::string_view blob);

void put_u32(std::string* out, std::uint32_t v);
bool get_u32(std::string_view* in, std::uint32_t* v);

// Blocking helpers on a connected stream socket, with a deadline.
absl::Status write_frame(int fd, std::string_view body);
absl::StatusOr<std::string> read_frame(int fd, int timeout_ms);

}  // namespace sluice::detail
