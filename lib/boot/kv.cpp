#include "boot/kv.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <absl/strings/escaping.h>
#include <absl/strings/str_format.h>

namespace sluice::detail {

void put_u32(std::string* out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

bool get_u32(std::string_view* in, std::uint32_t* v) {
  if (in->size() < 4) return false;
  *v = 0;
  for (int i = 0; i < 4; ++i) *v |= static_cast<std::uint32_t>(static_cast<unsigned char>((*in)[i])) << (8 * i);
  in->remove_prefix(4);
  return true;
}

std::string encode_kv(const KvMap& kv) {
  std::string out;
  for (const auto& [k, v] : kv) {
    put_u32(&out, static_cast<std::uint32_t>(k.size()));
    out += k;
    put_u32(&out, static_cast<std::uint32_t>(v.size()));
    out += v;
  }
  return out;
}

namespace {
// One length-prefixed field of a blob; `what` and `at` (its byte offset) name it in the error.
absl::StatusOr<std::string_view> take_field(std::string_view* blob, const char* what, std::size_t at) {
  std::uint32_t len = 0;
  if (!get_u32(blob, &len))
    return absl::DataLossError(absl::StrFormat("bootstrap blob: %s length cut short at byte %u", what, at));
  if (len > blob->size()) {
    return absl::DataLossError(absl::StrFormat(
        "bootstrap blob: %s length %u at byte %u runs past its end (%u bytes left)", what, len, at, blob->size()));
  }
  std::string_view field = blob->substr(0, len);
  blob->remove_prefix(len);
  return field;
}
}  // namespace

absl::StatusOr<KvMap> decode_kv(std::string_view blob) {
  KvMap kv;
  const std::size_t total = blob.size();
  while (!blob.empty()) {
    SLUICE_ASSIGN_OR_RETURN(std::string_view key, take_field(&blob, "key", total - blob.size()));
    SLUICE_ASSIGN_OR_RETURN(std::string_view value, take_field(&blob, "value", total - blob.size()));
    // encode_kv writes each key once: a second one is a blob no rank wrote.
    if (!kv.emplace(key, value).second)
      return absl::DataLossError(absl::StrFormat("bootstrap blob: key '%s' twice",
                                                 absl::CHexEscape(absl::string_view(key.data(), key.size()))));
  }
  return kv;
}

absl::Status write_frame(int fd, std::string_view body) {
  // The reader refuses a frame above the limit and drops the connection: refuse it here, with
  // its size, before a byte goes (a larger length would also not fit the u32 prefix).
  if (body.size() > kMaxBootMessage) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bootstrap frame of %u bytes is too large (at most %u: a bootstrap value must be smaller)",
                        body.size(), kMaxBootMessage));
  }
  std::string buf;
  put_u32(&buf, static_cast<std::uint32_t>(body.size()));
  buf += body;
  std::size_t off = 0;
  while (off < buf.size()) {
    // MSG_NOSIGNAL: a peer that has gone is an error here, never a SIGPIPE.
    ssize_t n = ::send(fd, buf.data() + off, buf.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError(absl::StrFormat("bootstrap write: %s", std::strerror(errno)));
    off += static_cast<std::size_t>(n);
  }
  return absl::OkStatus();
}

namespace {
absl::Status read_exact(int fd, char* out, std::size_t len, std::chrono::steady_clock::time_point deadline) {
  std::size_t off = 0;
  while (off < len) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return absl::DeadlineExceededError("bootstrap reply did not come in time");
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    ssize_t n = ::read(fd, out + off, len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return absl::UnavailableError("bootstrap service closed the connection");
    if (n < 0) return absl::UnavailableError(absl::StrFormat("bootstrap read: %s", std::strerror(errno)));
    off += static_cast<std::size_t>(n);
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<std::string> read_frame(int fd, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char len_buf[4];
  SLUICE_RETURN_IF_ERROR(read_exact(fd, len_buf, 4, deadline));
  std::string_view lv(len_buf, 4);
  std::uint32_t len = 0;
  get_u32(&lv, &len);
  if (len > kMaxBootMessage)
    return absl::DataLossError(absl::StrFormat("bootstrap frame of %u bytes is too large", len));
  std::string body(len, '\0');
  SLUICE_RETURN_IF_ERROR(read_exact(fd, body.data(), len, deadline));
  return body;
}

}  // namespace sluice::detail
