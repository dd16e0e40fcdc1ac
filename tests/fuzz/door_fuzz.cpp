// libFuzzer target for the front door's pre-handshake parser (lib/wire/door.h): the input is
// read as a stream of frames, as a connection's reader takes them. Decoding never reads past
// the input, every length is checked before it is used, and whatever is accepted re-encodes to
// exactly the bytes it came from (the encoding is canonical: reserved bytes are zero).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "wire/door.h"

using namespace sluice::detail::door;

namespace {

template <typename T, typename Encode>
void round_trip(std::span<const std::byte> frame, std::span<const std::byte> body, Encode encode_it) {
  T m;
  if (decode(body, &m) != Parse::kOk) return;
  std::vector<std::byte> again;
  encode_it(m, &again);
  if (again.size() != frame.size() || std::memcmp(again.data(), frame.data(), frame.size()) != 0) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> copy(size);  // exact size: ASan catches any read past it
  if (size) std::memcpy(copy.data(), data, size);
  std::span<const std::byte> rest(copy);
  while (true) {
    FrameHeader h;
    if (decode_header(rest, &h) != Parse::kOk) break;
    if (h.body_len > kMaxFrame - kFrameHeaderSize) std::abort();  // the bound a reader buffers
    if (rest.size() < kFrameHeaderSize + h.body_len) break;
    auto frame = rest.first(kFrameHeaderSize + h.body_len);
    auto body = frame.subspan(kFrameHeaderSize);
    switch (h.kind) {
      case Kind::kClientHello:
        round_trip<ClientHello>(frame, body, [](const ClientHello& m, auto* out) { encode(m, out); });
        break;
      case Kind::kServerHello:
        round_trip<ServerHello>(frame, body, [](const ServerHello& m, auto* out) { encode(m, out); });
        break;
      case Kind::kClientProof:
      case Kind::kAccept:
        round_trip<Credentials>(frame, body, [&](const Credentials& m, auto* out) { encode(h.kind, m, out); });
        break;
      case Kind::kRefuse: round_trip<Refuse>(frame, body, [](const Refuse& m, auto* out) { encode(m, out); }); break;
    }
    rest = rest.subspan(frame.size());
  }
  return 0;
}
