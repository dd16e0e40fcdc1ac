// libFuzzer target for the stream transport's reader (lib/transport/stream.h): the input is
// what a hostile peer writes on its connection after the door admitted it. The first byte picks
// the receiving side's set-up (receives posted or not, a small unexpected bound, sealed or not);
// the rest goes down a socketpair in slices while the connection reads. Whatever the bytes, the
// reader stays inside its buffers (ASan), holds no more unexpected bytes than its bound, and
// either keeps going or fails the connection with a reason; closing it afterwards completes
// every receive it still holds exactly once.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "transport/stream.h"

using namespace sluice::detail;

namespace {

struct Recv {
  TransportOp op;
  int calls = 0;
  std::vector<std::byte> buf;
};

void on_recv(TransportOp* op, absl::StatusCode, std::size_t length, Tag) {
  auto* r = reinterpret_cast<Recv*>(op);  // op is the first member
  if (++r->calls > 1 || length > r->buf.size()) std::abort();
}

void on_error(void* arg, int) { ++*static_cast<int*>(arg); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0) return 0;
  StreamOptions o;
  o.eager_max = 256;
  o.frame_max = 1024;
  o.unexpected_max = (mode & 1) ? 2048 : 64 * 1024;
  if (mode & 2) {
    o.suite = static_cast<std::uint8_t>(stream::Suite::kChaCha20Poly1305);
    for (std::size_t i = 0; i < o.rx_key.size(); ++i) o.rx_key[i] = static_cast<std::byte>(i);
  }
  int errors = 0;
  StreamHub hub;
  StreamConn* c = hub.open(o, &on_error, &errors);
  c->attach(sv[0]);
  std::vector<Recv> recvs((mode & 4) ? 8 : 0);
  for (std::size_t i = 0; i < recvs.size(); ++i) {
    recvs[i].op.on_complete = &on_recv;
    recvs[i].buf.resize(i % 2 ? 64 : 2048);
    c->post_recv(&recvs[i].op, recvs[i].buf.data(), recvs[i].buf.size(), i % 3, i == 7 ? 0 : kFullMask);
  }
  for (std::size_t at = 1; at < size && errors == 0;) {
    ssize_t n = ::write(sv[1], data + at, std::min<std::size_t>(size - at, 1 + (mode >> 3) * 97));
    if (n > 0) at += static_cast<std::size_t>(n);
    hub.progress();
    if (c->unexpected_bytes() > o.unexpected_max) std::abort();
  }
  for (int i = 0; i < 4 && errors == 0; ++i) hub.progress();
  ::close(sv[1]);
  for (int i = 0; i < 4 && errors == 0; ++i) hub.progress();  // the close: a reason, once
  if (errors > 1 || (errors == 1 && c->failure().empty())) std::abort();
  hub.close(c);
  for (const Recv& r : recvs)
    if (r.calls != 1) std::abort();  // each receive completed exactly once (data or cancelled)
  return 0;
}
