// Test support: two ranks in one process, each with its own Context and Engine, driven by
// their own threads; a watchdog so a hang fails the test.
#pragma once

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <thread>

#include <gtest/gtest.h>
#include <sluice/context.h>

namespace sluice::testing_support {

template <typename T>
std::span<const std::byte> bytes_of(const T& v) {
  return std::as_bytes(std::span(&v, 1));
}

// One engine in a context of its own (a group of one): a server or a client of client/server
// tests.
struct SingleEngine {
  explicit SingleEngine(const Config& c) {
    auto ctx = Context::create(ContextOptions{.config = c, .bootstrap = std::move(make_in_process_group(1).front())});
    EXPECT_TRUE(ctx.ok()) << ctx.status();
    context = std::move(*ctx);
    auto e = context->create_engine();
    EXPECT_TRUE(e.ok()) << e.status();
    engine = std::move(*e);
  }
  std::unique_ptr<Context> context;
  std::unique_ptr<Engine> engine;
};

class RankPair {
 public:
  explicit RankPair(const std::optional<Config>& config = std::nullopt) : RankPair(config, config) {}
  // Each rank with a configuration of its own.
  RankPair(const std::optional<Config>& config0, const std::optional<Config>& config1) {
    auto boots = make_in_process_group(2);
    std::thread other([&] { make(1, std::move(boots[1]), config1); });
    make(0, std::move(boots[0]), config0);
    other.join();
  }
  ~RankPair() {
    // Engines shut down concurrently: each says goodbye to the other.
    std::thread other([&] { engines_[1].reset(); });
    engines_[0].reset();
    other.join();
  }

  Engine& engine(int r) { return *engines_[r]; }
  // Destroys rank r's engine now (its orderly close); the other may go on.
  void close(int r) { engines_[r].reset(); }

  // Runs `f0` on rank 0 and `f1` on rank 1 concurrently, each on its own thread.
  void run(const std::function<void(Engine&)>& f0, const std::function<void(Engine&)>& f1) {
    std::thread t([&] {
      f1(*engines_[1]);
      engines_[1]->release_thread();  // the next run() drives it from another thread
    });
    f0(*engines_[0]);
    t.join();
  }

 private:
  void make(int r, std::unique_ptr<Bootstrap> boot, const std::optional<Config>& config) {
    ContextOptions opts;
    opts.bootstrap = std::move(boot);
    opts.config = config;
    auto ctx = Context::create(std::move(opts));
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    contexts_[r] = std::move(*ctx);
    auto eng = contexts_[r]->create_engine();
    ASSERT_TRUE(eng.ok()) << eng.status();
    engines_[r] = std::move(*eng);
  }
  std::unique_ptr<Context> contexts_[2];
  std::unique_ptr<Engine> engines_[2];
};

}  // namespace sluice::testing_support
