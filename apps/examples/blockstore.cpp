// blockstore: a small block-storage server and client on Sluice's client/server mode.
//
//   blockstore serve HOST:PORT                  run a server
//   blockstore check HOST:PORT [BLOCKS]         write blocks of 4 KiB .. 4 MiB, read them back
//   blockstore demo                             both in one process: one Context, two engines,
//                                               the server's driven by a thread of its own
//
// Writes land directly in the server's block (a PayloadSink chooses the destination: no
// copy through any intermediate buffer); reads are answered zero-copy from the block
// (Message::reply with a completion), into the client's buffer (CallOptions::reply_buffer).
// A block is shared between the store and the replies still reading it, so a write never
// changes bytes a reply is sending: it lands in a new block that replaces the old one.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <sluice/sluice.h>

namespace {

constexpr sluice::HandlerId kWrite = 1, kRead = 2;

struct BlockHeader {
  std::uint64_t id;
};

std::uint64_t block_id(const sluice::Message& m) {
  BlockHeader h{};
  if (m.header().size() == sizeof(h)) std::memcpy(&h, m.header().data(), sizeof(h));
  return h.id;
}

class Server {
 public:
  using Block = std::shared_ptr<std::vector<std::byte>>;

  absl::Status start(sluice::Engine& engine, const std::string& address, int* port) {
    sluice::HandlerOptions write_options;
    // A large write lands in the block itself; in a new one when a reply still reads the old.
    write_options.sink = [this](const sluice::Message& m, std::size_t size) {
      Block& block = writable(block_id(m));
      block->resize(size);
      return std::span<std::byte>(*block);
    };
    SLUICE_RETURN_IF_ERROR(engine.register_handler(
        kWrite,
        [this](sluice::Message& m) {
          Block& block = blocks_[block_id(m)];
          if (!block || block->data() != m.payload().data())  // eager: the bytes are in the message
            writable(block_id(m))->assign(m.payload().begin(), m.payload().end());
          (void)m.reply_copy({}, {});  // an empty acknowledgement: nothing to keep alive
        },
        write_options));
    SLUICE_RETURN_IF_ERROR(engine.register_handler(kRead, [this](sluice::Message& m) {
      auto it = blocks_.find(block_id(m));
      if (it == blocks_.end()) {
        (void)m.reply_error(absl::NotFoundError("no such block"));
        return;
      }
      // Zero copy: the reply reads the block itself, kept alive until its send completes.
      Block block = it->second;
      (void)m.reply({}, *block, [block](const absl::Status&) {});
    }));
    SLUICE_ASSIGN_OR_RETURN(*port, engine.listen(address));
    return absl::OkStatus();
  }
  std::size_t blocks() const { return blocks_.size(); }

 private:
  // The block `id`, for writing: a new one when replies still share the current one.
  Block& writable(std::uint64_t id) {
    Block& block = blocks_[id];
    if (!block || block.use_count() > 1) block = std::make_shared<std::vector<std::byte>>();
    return block;
  }
  std::map<std::uint64_t, Block> blocks_;
};

std::vector<std::byte> block_data(std::uint64_t id, std::size_t size) {
  std::vector<std::byte> v(size);
  for (std::size_t i = 0; i < size; ++i) v[i] = static_cast<std::byte>((id * 131 + i * 7) & 0xff);
  return v;
}

// Writes `count` blocks of sizes 4 KiB .. 4 MiB, reads each back into a buffer of its own and
// compares. Returns the number of mismatches (or -1 on an error).
int check(sluice::Engine& engine, const std::string& address, int count) {
  auto peer = engine.connect(address);
  if (!peer.ok()) {
    std::fprintf(stderr, "blockstore: %s\n", peer.status().ToString().c_str());
    return -1;
  }
  int pending = 0, bad = 0, errors = 0;
  // Every call completes exactly once (the library bounds it: a dead or silent server fails
  // them with Unavailable), and its callback and reply buffer are this function's: so it
  // never returns while a call is outstanding, even after an error.
  auto drain = [&] { engine.run_until([&] { return pending == 0; }); };
  auto size_of = [](int i) { return std::size_t{4096} << (i % 11); };  // 4 KiB .. 4 MiB
  std::vector<std::vector<std::byte>> written(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    BlockHeader h{static_cast<std::uint64_t>(i)};
    written[static_cast<std::size_t>(i)] = block_data(h.id, size_of(i));
    // kWouldBlock (no room in the RPC window or credit yet): retried inside run_until, which
    // progresses between attempts and sleeps while nothing arrives.
    sluice::Result r = sluice::Result::kWouldBlock;
    engine.run_until([&] {
      r = (*peer)->call(kWrite, std::as_bytes(std::span(&h, 1)), written[static_cast<std::size_t>(i)], {},
                        [&](const absl::Status& s, sluice::Message&) {
                          errors += !s.ok();
                          --pending;
                        });
      return r != sluice::Result::kWouldBlock;
    });
    if (r != sluice::Result::kOk) {  // its callback will not run
      std::fprintf(stderr, "blockstore: write of block %d: %s\n", i, sluice::to_string(r));
      ++errors;
      break;
    }
    ++pending;
  }
  drain();
  if (errors) {
    std::fprintf(stderr, "blockstore: %d writes failed\n", errors);
    return -1;
  }
  std::vector<std::vector<std::byte>> read(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    BlockHeader h{static_cast<std::uint64_t>(i)};
    auto& buf = read[static_cast<std::size_t>(i)];
    buf.resize(size_of(i));
    sluice::CallOptions o;
    o.reply_buffer = buf;  // the block lands here, straight from the server's memory
    sluice::Result r = sluice::Result::kWouldBlock;
    engine.run_until([&] {
      r = (*peer)->call(kRead, std::as_bytes(std::span(&h, 1)), {}, o,
                        [&, i](const absl::Status& s, sluice::Message& reply) {
                          --pending;
                          if (!s.ok()) {
                            ++errors;
                            return;
                          }
                          if (reply.payload().size() != written[static_cast<std::size_t>(i)].size() ||
                              std::memcmp(reply.payload().data(), written[static_cast<std::size_t>(i)].data(),
                                          reply.payload().size()) != 0)
                            ++bad;
                        });
      return r != sluice::Result::kWouldBlock;
    });
    if (r != sluice::Result::kOk) {
      std::fprintf(stderr, "blockstore: read of block %d: %s\n", i, sluice::to_string(r));
      ++errors;
      break;
    }
    ++pending;
  }
  drain();
  std::size_t bytes = 0;
  for (auto& w : written) bytes += w.size();
  std::printf("blockstore: wrote and read back %d blocks (%zu bytes): %d mismatches, %d errors\n", count, bytes, bad,
              errors);
  return errors ? -1 : bad;
}

template <typename T>
T or_exit(absl::StatusOr<T> v) {
  if (!v.ok()) {
    std::fprintf(stderr, "blockstore: %s\n", v.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*v);
}

// Both sides in one process: one Context, two engines. The server's engine is set up here,
// then driven by a thread of its own (run_until: it sleeps while nothing arrives); the client's
// by this thread. post() wakes the server's thread to see `stop`.
int demo(sluice::Context& ctx) {
  auto server_engine = or_exit(ctx.create_engine());
  Server server;
  int port = 0;
  if (auto s = server.start(*server_engine, "127.0.0.1:0", &port); !s.ok()) {
    std::fprintf(stderr, "blockstore: %s\n", s.ToString().c_str());
    return 1;
  }
  std::atomic<bool> stop{false};
  std::thread serving([&] { server_engine->run_until([&] { return stop.load(); }); });
  int result = 1;
  {
    auto client_engine = or_exit(ctx.create_engine());
    result = check(*client_engine, "127.0.0.1:" + std::to_string(port), 44);
  }  // the client closes while the server still runs, so both sides close in order
  stop = true;
  server_engine->post([] {});
  serving.join();
  return result == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "demo" && !((mode == "serve" || mode == "check") && argc > 2)) {
    std::fprintf(stderr, "usage: blockstore serve HOST:PORT | check HOST:PORT [BLOCKS] | demo\n");
    return 2;
  }
  auto ctx = or_exit(sluice::Context::create());  // one per process
  if (mode == "demo") return demo(*ctx);
  auto engine = or_exit(ctx->create_engine());
  if (mode == "check") return check(*engine, argv[2], argc > 3 ? std::atoi(argv[3]) : 44) == 0 ? 0 : 1;
  Server server;
  int port = 0;
  if (auto s = server.start(*engine, argv[2], &port); !s.ok()) {
    std::fprintf(stderr, "blockstore: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("blockstore: serving on port %d\n", port);
  std::fflush(stdout);
  engine->run_until([] { return false; });  // sleeps while no client calls
}
