// blockstore: a small block-storage server and client on Sluice's client/server mode.
//
//   blockstore serve [-j N] HOST:PORT           run a server (N engines on one port, a thread
//                                               each, over one store)
//   blockstore check HOST:PORT [BLOCKS]         write blocks of 4 KiB .. 4 MiB, read them back
//   blockstore demo                             both in one process: one Context, two engines,
//                                               the server's driven by a thread of its own
//
// Writes land directly in the server's block (a PayloadSink chooses the destination: no
// copy through any intermediate buffer); reads are answered zero-copy from the block
// (Message::reply with a completion), into the client's buffer (CallOptions::reply_buffer).
// A block is shared between the store and the replies still reading it, so a write never
// changes bytes a reply is sending: it lands in a new block that replaces the old one.
// With -j, several engines listen on one port (ListenOptions::share_port) over one store.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
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

// The blocks, shared by every engine that serves them. A write replaces a block whole, a read
// shares the current one with its reply: a reply never sees a later write's bytes.
class Store {
 public:
  using Block = std::shared_ptr<const std::vector<std::byte>>;

  void put(std::uint64_t id, Block block) {
    std::lock_guard<std::mutex> lock(mu_);
    blocks_[id] = std::move(block);
  }
  Block get(std::uint64_t id) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(id);
    return it == blocks_.end() ? nullptr : it->second;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::uint64_t, Block> blocks_;
};

// One engine's handlers over the shared store.
class Server {
 public:
  explicit Server(Store& store) : store_(store) {}

  absl::Status start(sluice::Engine& engine, const std::string& address, sluice::ListenOptions listen, int* port) {
    sluice::HandlerOptions write_options;
    // A large write lands in a new block of its own, installed when its handler runs.
    write_options.sink = [this](const sluice::Message&, std::size_t size) {
      auto block = std::make_shared<std::vector<std::byte>>(size);
      std::span<std::byte> landing(*block);
      landing_.emplace(landing.data(), std::move(block));
      return landing;
    };
    write_options.sink_release = [this](const sluice::Message&, std::span<std::byte> buffer) {
      landing_.erase(buffer.data());
    };
    SLUICE_RETURN_IF_ERROR(engine.register_handler(
        kWrite,
        [this](sluice::Message& m) {
          Store::Block block;
          if (auto it = landing_.find(m.payload().data()); it != landing_.end()) {
            block = std::move(it->second);
            landing_.erase(it);
          } else {  // eager: the bytes are in the message
            block = std::make_shared<const std::vector<std::byte>>(m.payload().begin(), m.payload().end());
          }
          store_.put(block_id(m), std::move(block));
          (void)m.reply_copy({}, {});  // an empty acknowledgement: nothing to keep alive
        },
        write_options));
    SLUICE_RETURN_IF_ERROR(engine.register_handler(kRead, [this](sluice::Message& m) {
      Store::Block block = store_.get(block_id(m));
      if (!block) {
        (void)m.reply_error(absl::NotFoundError("no such block"));
        return;
      }
      // Zero copy: the reply reads the block itself, kept alive until its send completes.
      (void)m.reply({}, *block, [block](const absl::Status&) {});
    }));
    SLUICE_ASSIGN_OR_RETURN(*port, engine.listen(address, listen));
    return absl::OkStatus();
  }

 private:
  Store& store_;
  // Writes landing through the sink, by landing address (this engine's thread only).
  std::map<const std::byte*, std::shared_ptr<std::vector<std::byte>>> landing_;
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
  Store store;
  Server server(store);
  int port = 0;
  if (auto s = server.start(*server_engine, "127.0.0.1:0", {}, &port); !s.ok()) {
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

// `engines` engines on one port (ListenOptions::share_port), each driven by a thread of its own,
// over one store: the kernel spreads the clients among them.
int serve(sluice::Context& ctx, const std::string& address, int engines) {
  Store store;
  std::vector<std::unique_ptr<sluice::Engine>> serving;
  std::vector<std::unique_ptr<Server>> servers;
  std::string host = address.substr(0, address.rfind(':'));
  int port = 0;
  for (int i = 0; i < engines; ++i) {
    serving.push_back(or_exit(ctx.create_engine()));
    servers.push_back(std::make_unique<Server>(store));
    // The first listens where it was asked (port 0: any free one), the others on its port.
    std::string where = i == 0 ? address : host + ":" + std::to_string(port);
    if (auto s = servers.back()->start(*serving.back(), where, {.share_port = engines > 1}, &port); !s.ok()) {
      std::fprintf(stderr, "blockstore: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  std::printf("blockstore: serving on port %d\n", port);  // scripts read the port as the last word
  std::fflush(stdout);
  std::vector<std::thread> threads;
  for (int i = 1; i < engines; ++i)
    threads.emplace_back([e = serving[static_cast<std::size_t>(i)].get()] { e->run_until([] { return false; }); });
  serving[0]->run_until([] { return false; });  // sleeps while no client calls
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  int engines = 1;
  if (args.size() >= 3 && args[0] == "serve" && args[1] == "-j") {
    engines = std::atoi(args[2].c_str());
    args.erase(args.begin() + 1, args.begin() + 3);
  }
  std::string mode = args.empty() ? "" : args[0];
  if (engines < 1 || engines > 256 || (mode != "demo" && !((mode == "serve" || mode == "check") && args.size() > 1))) {
    std::fprintf(stderr, "usage: blockstore serve [-j ENGINES] HOST:PORT | check HOST:PORT [BLOCKS] | demo\n");
    return 2;
  }
  auto ctx = or_exit(sluice::Context::create());  // one per process
  if (mode == "demo") return demo(*ctx);
  if (mode == "serve") return serve(*ctx, args[1], engines);
  auto engine = or_exit(ctx->create_engine());
  return check(*engine, args[1], args.size() > 2 ? std::atoi(args[2].c_str()) : 44) == 0 ? 0 : 1;
}
