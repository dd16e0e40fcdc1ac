// libFuzzer target for the wire parser: decode never reads past the input, and whatever it
// accepts (either header form) survives encode -> decode unchanged.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "wire/wire.h"

using namespace sluice::detail::wire;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> copy(size);  // exact size: ASan catches any read past it
  if (size) std::memcpy(copy.data(), data, size);
  Header h;
  if (decode(copy, &h) == Parse::kOk) {
    std::vector<std::byte> again(size);
    std::memcpy(again.data(), copy.data(), size);
    encode_as_decoded(h, again.data());
    Header back;
    if (decode(again, &back) != Parse::kOk || !(back == h)) std::abort();
  }
  // The receive path's walk over coalesced messages: every message it yields lies inside the
  // input (ASan checks the reads), and they come in increasing order.
  const std::byte* end = copy.data() + size;
  const std::byte* last = nullptr;
  (void)for_each_message(copy, [&](const Header&, std::span<const std::byte> msg) {
    if (msg.data() + msg.size() > end || msg.data() <= last) std::abort();
    last = msg.data();
    unsigned sum = 0;
    for (std::byte b : msg) sum += static_cast<unsigned>(b);  // touch every byte it claims
    return sum != ~0u;
  });
  Hello hello;
  if (decode_hello(copy, &hello) == Parse::kOk) {
    std::vector<std::byte> again(kHelloSize);
    encode_hello(hello, again.data());
    if (std::memcmp(again.data(), copy.data(), kHelloSize) != 0) std::abort();
  }
  return 0;
}
