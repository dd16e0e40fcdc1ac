// Client/server mode: a server engine listens, clients connect through Sluice's front door
// (its own pre-handshake, with or without the key), messages and calls flow both ways,
// clients come and go.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sluice/context.h>

#include "testing/payload.h"
#include "testing/ranks.h"

namespace sluice {
namespace {

using testing_support::crc32c;
using testing_support::pattern;

constexpr HandlerId kPut = 1, kGet = 2;
const auto kLong = std::chrono::seconds(60);

// A server or client engine. `transport`: "shm" (UCX over shared memory, as for any client on
// the server's host) or "stream" (Sluice's TCP transport, as for a client on another host).
Config node_config(const char* transport, const std::string& key_file, AuthMode auth, Encrypt encrypt) {
  Config c = *Config::from_env();
  c.cs_transport = std::string_view(transport) == "stream" ? CsTransport::kStream : CsTransport::kAuto;
  c.auth_key_file = key_file;
  c.auth = auth;
  c.encrypt = encrypt;
  return c;
}
struct Node : testing_support::SingleEngine {
  explicit Node(const char* transport, const std::string& key_file = "", AuthMode auth = AuthMode::kAuto,
                Encrypt encrypt = Encrypt::kOff)
      : SingleEngine(node_config(transport, key_file, auth, encrypt)) {}
};

class ClientServer : public ::testing::TestWithParam<const char*> {};

TEST_P(ClientServer, MessagesAndCallsBothWaysWithSeveralClients) {
  Node server(GetParam());
  auto port = server.engine->listen("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  ASSERT_GT(*port, 0);
  std::atomic<bool> stop{false};
  std::vector<int> puts_from;  // source ids, server thread only
  ASSERT_TRUE(server.engine
                  ->register_handler(kPut,
                                     [&](Message& m) {
                                       puts_from.push_back(m.source());
                                       // Answer every one-way message with a message back to its sender.
                                       EXPECT_EQ(m.peer()->send_copy(kPut, {}, m.payload()), Result::kOk);
                                     })
                  .ok());
  ASSERT_TRUE(server.engine
                  ->register_handler(kGet,
                                     [&](Message& m) {
                                       std::uint64_t n;
                                       std::memcpy(&n, m.payload().data(), sizeof(n));
                                       EXPECT_EQ(m.reply_copy({}, pattern(n, n)), Result::kOk);
                                     })
                  .ok());
  std::thread serving([&] { server.engine->run_until([&] { return stop.load(); }, Clock::now() + kLong); });

  constexpr int kClients = 3;
  std::vector<std::thread> clients;
  std::atomic<int> good{0}, done{0};
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      Node client(GetParam());
      auto peer = client.engine->connect("127.0.0.1:" + std::to_string(*port));
      ASSERT_TRUE(peer.ok()) << peer.status();
      Peer* srv = *peer;
      EXPECT_EQ(srv->rank(), -1);
      int echoes = 0;
      ASSERT_TRUE(client.engine
                      ->register_handler(kPut,
                                         [&](Message& m) {
                                           int v;
                                           std::memcpy(&v, m.payload().data(), sizeof(v));
                                           EXPECT_EQ(v, c * 1000 + echoes);
                                           ++echoes;
                                         })
                      .ok());
      for (int i = 0; i < 100; ++i) {
        int v = c * 1000 + i;
        Result r;
        while ((r = srv->send_copy(kPut, {}, std::as_bytes(std::span(&v, 1)))) == Result::kWouldBlock)
          client.engine->progress();
        ASSERT_EQ(r, Result::kOk);
      }
      int replies = 0;
      std::vector<std::vector<std::byte>> bufs(2, std::vector<std::byte>(std::size_t{2} << 20));
      int k = 0;
      for (std::uint64_t n : {std::uint64_t{16}, std::uint64_t{1} << 20}) {
        CallOptions o;
        o.reply_buffer = bufs[static_cast<std::size_t>(k++)];  // one buffer per call in flight
        ASSERT_EQ(srv->call(kGet, {}, std::as_bytes(std::span(&n, 1)), o,
                            [&, n](absl::Status s, Message& r) {
                              ASSERT_TRUE(s.ok()) << s;
                              EXPECT_EQ(r.payload().size(), n);
                              EXPECT_EQ(crc32c(r.payload()), crc32c(pattern(n, n)))
                                  << "client " << c << " reply of " << n;
                              ++replies;
                            }),
                  Result::kOk);
      }
      ASSERT_TRUE(client.engine->run_until([&] { return echoes == 100 && replies == 2; }, Clock::now() + kLong));
      ++good;
      // Connected until every client is done: a gone client's index may serve a later one, so
      // only clients connected at the same time must have indices of their own.
      ++done;
      (void)client.engine->run_until([&] { return done.load() == kClients; }, Clock::now() + kLong);
    });
  }
  for (auto& t : clients) t.join();
  stop = true;
  serving.join();
  EXPECT_EQ(good.load(), kClients);
  EXPECT_EQ(puts_from.size(), static_cast<std::size_t>(kClients * 100));
  std::vector<int> ids = puts_from;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  EXPECT_EQ(ids.size(), static_cast<std::size_t>(kClients)) << "each client has its own peer id";
}

TEST_P(ClientServer, ConnectToNobodyIsRefusedAtOnceNamingTheAddress) {
  Config c;
  c.cs_transport = std::string_view(GetParam()) == "stream" ? CsTransport::kStream : CsTransport::kAuto;
  c.connect_timeout = std::chrono::seconds(3);
  auto ctx = Context::create(ContextOptions{.config = c, .bootstrap = std::move(make_in_process_group(1).front())});
  ASSERT_TRUE(ctx.ok());
  auto e = (*ctx)->create_engine();
  ASSERT_TRUE(e.ok());
  auto t0 = Clock::now();
  auto peer = (*e)->connect("127.0.0.1:1");  // nothing listens on port 1
  auto took = Clock::now() - t0;
  EXPECT_FALSE(peer.ok());
  EXPECT_EQ(peer.status().code(), absl::StatusCode::kUnavailable) << peer.status();
  EXPECT_THAT(std::string(peer.status().message()), ::testing::HasSubstr("127.0.0.1:1"));
  EXPECT_THAT(std::string(peer.status().message()), ::testing::HasSubstr("refused"));
  EXPECT_LT(took, std::chrono::milliseconds(500)) << "a refused connection fails at once, not at the timeout";
  EXPECT_EQ((*e)->connect("no-port").status().code(), absl::StatusCode::kInvalidArgument);
}

// A key file of `secret`, readable by its owner only, removed with the object.
struct KeyFile {
  explicit KeyFile(const std::string& secret, ::mode_t mode = 0600) {
    static int n = 0;
    path = (std::filesystem::temp_directory_path() /
            ("sluice_key_" + std::to_string(::getpid()) + "_" + std::to_string(n++)))
               .string();
    std::ofstream(path) << secret;
    ::chmod(path.c_str(), mode);
  }
  ~KeyFile() { std::filesystem::remove(path); }
  std::string path;
};

// A call to `peer` that must succeed.
void expect_call_succeeds(Engine& engine, Peer* peer) {
  bool done = false;
  ASSERT_EQ(peer->call(kGet, {}, {}, {},
                       [&](absl::Status s, Message&) {
                         EXPECT_TRUE(s.ok()) << s;
                         done = true;
                       }),
            Result::kOk);
  EXPECT_TRUE(engine.run_until([&] { return done; }, Clock::now() + kLong));
}

// Whether this machine has an IPv6 loopback (::1 can be bound).
bool has_ipv6_loopback() {
  int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 sa{};
  sa.sin6_family = AF_INET6;
  sa.sin6_addr = in6addr_loopback;
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
  ::close(fd);
  return ok;
}

TEST_P(ClientServer, AnIpv6AddressInBracketsListensAndConnects) {
  if (!has_ipv6_loopback()) GTEST_SKIP() << "this machine has no IPv6 loopback (::1 cannot be bound)";
  Node server(GetParam());
  auto port = server.engine->listen("[::1]:0");
  ASSERT_TRUE(port.ok()) << port.status();
  ASSERT_TRUE(server.engine->register_handler(kGet, [](Message& m) { (void)m.reply_copy({}, {}); }).ok());
  std::atomic<bool> stop{false};
  std::thread serving([&] { server.engine->run_until([&] { return stop.load(); }, Clock::now() + kLong); });
  {
    Node client(GetParam());
    auto peer = client.engine->connect("[::1]:" + std::to_string(*port));
    ASSERT_TRUE(peer.ok()) << peer.status();
    expect_call_succeeds(*client.engine, *peer);
    // Nothing listens on port 1: the error names the address as it was given, brackets and all.
    auto refused = client.engine->connect("[::1]:1");
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
    EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("[::1]:1"));
    // Without brackets an IPv6 address is ambiguous: refused, saying how to write it.
    auto bare = client.engine->connect("::1:1");
    EXPECT_EQ(bare.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(bare.status().message()), ::testing::HasSubstr("[::1]:1"));
  }
  stop = true;
  server.engine->post([] {});
  serving.join();
}

TEST_P(ClientServer, OnlyClientsWithTheServersKeyGetIn) {
  KeyFile key("a secret both sides share\n"), same("a secret both sides share"),
      other("another secret, not the server's");
  Node server(GetParam(), key.path);
  auto port = server.engine->listen("127.0.0.1:0");
  ASSERT_TRUE(port.ok());
  std::string address = "127.0.0.1:" + std::to_string(*port);
  ASSERT_TRUE(server.engine->register_handler(kGet, [](Message& m) { (void)m.reply_copy({}, {}); }).ok());
  std::atomic<bool> stop{false};
  std::thread serving([&] { server.engine->run_until([&] { return stop.load(); }, Clock::now() + kLong); });

  {  // the same secret (a final newline is not part of it): in, and calls work
    Node client(GetParam(), same.path);
    auto peer = client.engine->connect(address);
    ASSERT_TRUE(peer.ok()) << peer.status();
    expect_call_succeeds(*client.engine, *peer);
  }
  ::testing::internal::CaptureStderr();
  {  // a wrong key: refused on the client's side by the server's failed proof, and the server told
    Node client(GetParam(), other.path);
    auto peer = client.engine->connect(address);
    ASSERT_FALSE(peer.ok());
    EXPECT_EQ(peer.status().code(), absl::StatusCode::kPermissionDenied) << peer.status();
    EXPECT_THAT(std::string(peer.status().message()), ::testing::HasSubstr("SLUICE_AUTH_KEY_FILE"));
    EXPECT_THAT(std::string(peer.status().message()), ::testing::HasSubstr(address));
  }
  {  // no key at all: the server refuses it, and says which variable to set
    Node client(GetParam());
    auto peer = client.engine->connect(address);
    ASSERT_FALSE(peer.ok());
    EXPECT_EQ(peer.status().code(), absl::StatusCode::kPermissionDenied) << peer.status();
    EXPECT_THAT(std::string(peer.status().message()), ::testing::HasSubstr("SLUICE_AUTH_KEY_FILE"));
  }
  std::uint64_t refused = 0, accepted = 0, table = 0, closed_early = 0;
  server.engine->post([&] {
    refused = server.engine->stats().value("door.refused_auth");
    accepted = server.engine->stats().value("door.accepted");
    table = server.engine->stats().value("peers.table");
    closed_early = server.engine->stats().value("door.closed_early");
    stop = true;
  });
  serving.join();
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(refused, 2u) << "the wrong key and the keyless client are both counted at the server";
  EXPECT_EQ(closed_early, 0u) << "the client with the wrong key did not just leave: it refused us";
  EXPECT_THAT(log, ::testing::HasSubstr("refused us: our proof does not match its key (SLUICE_AUTH_KEY_FILE differs)"));
  EXPECT_EQ(accepted, 1u);
  EXPECT_LE(table, 2u) << "refused clients cost the server no peer and no endpoint";
}

TEST_P(ClientServer, AClientRequiringAuthenticationRefusesAServerWithout) {
  KeyFile key("a secret only the client has");
  Node server(GetParam());  // no key: SLUICE_AUTH resolves to off
  auto port = server.engine->listen("127.0.0.1:0");
  ASSERT_TRUE(port.ok());
  std::atomic<bool> stop{false};
  std::thread serving([&] { server.engine->run_until([&] { return stop.load(); }, Clock::now() + kLong); });
  Node client(GetParam(), key.path);
  auto peer = client.engine->connect("127.0.0.1:" + std::to_string(*port));
  EXPECT_EQ(peer.status().code(), absl::StatusCode::kPermissionDenied) << peer.status();
  EXPECT_THAT(std::string(peer.status().message()), ::testing::HasSubstr("SLUICE_AUTH=required"));
  Node optional_client(GetParam(), key.path, AuthMode::kOptional);
  EXPECT_TRUE(optional_client.engine->connect("127.0.0.1:" + std::to_string(*port)).ok())
      << "SLUICE_AUTH=optional accepts a server without a key";
  stop = true;
  server.engine->post([] {});
  serving.join();
}

TEST_P(ClientServer, AnOptionalServerAdmitsKeylessClientsButNotWrongKeys) {
  KeyFile key("the server's secret, optional"), other("some other secret entirely");
  Node server(GetParam(), key.path, AuthMode::kOptional);
  auto port = server.engine->listen("127.0.0.1:0");
  ASSERT_TRUE(port.ok());
  ASSERT_TRUE(server.engine->register_handler(kGet, [](Message& m) { (void)m.reply_copy({}, {}); }).ok());
  std::atomic<bool> stop{false};
  std::thread serving([&] { server.engine->run_until([&] { return stop.load(); }, Clock::now() + kLong); });
  std::string address = "127.0.0.1:" + std::to_string(*port);
  {
    Node keyless(GetParam());
    auto peer = keyless.engine->connect(address);
    ASSERT_TRUE(peer.ok()) << peer.status();
    expect_call_succeeds(*keyless.engine, *peer);
  }
  {
    Node wrong(GetParam(), other.path, AuthMode::kOptional);
    EXPECT_EQ(wrong.engine->connect(address).status().code(), absl::StatusCode::kPermissionDenied);
  }
  stop = true;
  server.engine->post([] {});
  serving.join();
}

// Refused by Context::create, before anything starts (and by sluice-info -c, the same check).
TEST(ClientServerKeys, AKeyFileOthersCanReadOrTooShortFailsAtStartNamingTheVariable) {
  KeyFile open_key("a secret with the wrong mode", 0644), short_key("short\n\n\n\n\n\n\n\n\n\n\n");
  for (const KeyFile* k : {&open_key, &short_key}) {
    Config c = *Config::from_env();
    c.auth_key_file = k->path;
    auto ctx = Context::create(ContextOptions{.config = c, .bootstrap = std::move(make_in_process_group(1).front())});
    ASSERT_FALSE(ctx.ok());
    EXPECT_EQ(ctx.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(ctx.status().message()), ::testing::HasSubstr("SLUICE_AUTH_KEY_FILE=" + k->path));
    EXPECT_EQ(check_config(c), ctx.status());
  }
  Config c = *Config::from_env();
  c.auth = AuthMode::kRequired;
  EXPECT_THAT(std::string(c.validate().message()), ::testing::HasSubstr("SLUICE_AUTH_KEY_FILE"));
}

// Also docs/reliability.md's "the peer table returns to its starting point": a gone client's slot
// serves a later one, and the gone client's Peer, which a server may still hold, answers
// kUnavailable instead of reaching the newcomer.
TEST_P(ClientServer, ClientsComeAndGoAndTheServerKeepsServing) {
  constexpr int kRounds = 200;
  Node server(GetParam());
  auto port = server.engine->listen("127.0.0.1:0");
  ASSERT_TRUE(port.ok());
  std::atomic<bool> stop{false};
  int served = 0;
  std::vector<Peer*> handles;          // each round's client as the server saw it
  std::vector<std::uint32_t> sources;  // and its index
  ASSERT_TRUE(server.engine
                  ->register_handler(kGet,
                                     [&](Message& m) {
                                       ++served;
                                       handles.push_back(m.peer());
                                       sources.push_back(m.source());
                                       EXPECT_EQ(m.reply_copy({}, m.payload()), Result::kOk);
                                     })
                  .ok());
  std::thread serving([&] { server.engine->run_until([&] { return stop.load(); }, Clock::now() + kLong); });
  for (int round = 0; round < kRounds; ++round) {
    Node client(GetParam());
    auto peer = client.engine->connect("127.0.0.1:" + std::to_string(*port));
    ASSERT_TRUE(peer.ok()) << round << ": " << peer.status();
    bool done = false;
    ASSERT_EQ((*peer)->call(kGet, {}, std::as_bytes(std::span(&round, 1)), {},
                            [&](absl::Status s, Message&) {
                              EXPECT_TRUE(s.ok()) << s;
                              done = true;
                            }),
              Result::kOk);
    ASSERT_TRUE(client.engine->run_until([&] { return done; }, Clock::now() + kLong));
  }
  // The rest is read on the server's engine thread.
  std::uint64_t table = 0, reused = 0;
  int reached_newcomer = 0, checked = 0;
  server.engine->post([&] {
    table = server.engine->stats().value("peers.table");
    reused = server.engine->stats().value("peers.reused");
    for (std::size_t i = 0; i + 1 < handles.size(); ++i) {
      for (std::size_t j = i + 1; j < handles.size(); ++j) {
        if (sources[j] != sources[i]) continue;
        ++checked;
        EXPECT_NE(handles[i], handles[j]);
        EXPECT_FALSE(handles[i]->alive());
        if (handles[i]->send(kPut, {}, {}) != Result::kUnavailable) ++reached_newcomer;
      }
    }
    stop = true;
  });
  serving.join();
  std::printf("%d clients: the server's peer table has %llu entries, %llu slots reused\n", kRounds,
              static_cast<unsigned long long>(table), static_cast<unsigned long long>(reused));
  EXPECT_EQ(served, kRounds);
  EXPECT_GE(reused, kRounds / 2u) << "gone clients' slots served later ones";
  EXPECT_LE(table, 8u) << "the peer table stays small (a busy server may accept a client before "
                          "the last one's slot is free again)";
  EXPECT_GT(checked, 0);
  EXPECT_EQ(reached_newcomer, 0) << "a gone client's Peer answers kUnavailable";
}

// Heartbeats on an idle client/server link: the server pings its quiet clients (in batches, at
// its timer ticks), and a client that hears those pings sends none of its own; both stay up.
TEST_P(ClientServer, TheServerPingsQuietClientsWhichOnlyAnswer) {
  Config c = node_config(GetParam(), "", AuthMode::kAuto, Encrypt::kOff);
  c.heartbeat = std::chrono::milliseconds(100);
  c.peer_timeout = std::chrono::seconds(10);
  testing_support::SingleEngine server(c), client(c);
  auto port = server.engine->listen("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  std::atomic<bool> stop{false};
  std::uint64_t server_pings = 0;
  std::thread serving([&] {
    server.engine->run_until([&] { return stop.load(); }, Clock::now() + kLong);
    server_pings = server.engine->stats().value("peers.heartbeats");
  });
  auto peer = client.engine->connect("127.0.0.1:" + std::to_string(*port));
  ASSERT_TRUE(peer.ok()) << peer.status();
  // Idle for 20 heartbeat intervals: the client's engine only answers what comes.
  (void)client.engine->run_until([] { return false; }, Clock::now() + std::chrono::seconds(2));
  std::uint64_t client_pings = client.engine->stats().value("peers.heartbeats");
  bool alive = (*peer)->alive();
  stop = true;
  serving.join();
  std::printf("2 s idle, heartbeat 100 ms: the server sent %llu pings, the client %llu\n",
              static_cast<unsigned long long>(server_pings), static_cast<unsigned long long>(client_pings));
  EXPECT_TRUE(alive);
  EXPECT_GE(server_pings, 8u) << "the server pings its quiet client every heartbeat interval";
  // Each side pinged whenever it had not heard from the other for 100 ms before: then about
  // half the pings were the client's. A loaded machine may delay the server past the client's
  // 200 ms now and then.
  EXPECT_LE(client_pings, server_pings / 8) << "the client left the pinging to its server";
}

// Lets a server that served on `serving` run past the grace of a closed link (250 ms), then
// stops it: a failure it would count comes before its counters are read.
void stop_serving_past_the_grace(Engine& server, std::atomic<bool>& stop, std::thread& serving) {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  stop = true;
  server.post([] {});
  serving.join();
}

// An orderly close to a server that is slow to read: the client waits for the server's goodbye,
// which comes once the server has read everything sent before the client's BYE, rather than
// the 500 ms a rank gets; every message is handled and the server counts no failure. (A client
// that closed its link after 500 ms while its BYE still queued behind other work was failed by
// the server 250 ms later, with whatever it had not read; the crowd fault test's storm of
// closes did that to a quarter of its clients.)
TEST_P(ClientServer, AClosingClientWaitsForASlowServerWhichHandlesAllItSent) {
  constexpr int kMessages = 60;
  // Credits for every message at once: all are sent, and the BYE after them, before the first
  // is handled.
  Config c = node_config(GetParam(), "", AuthMode::kAuto, Encrypt::kOff);
  c.credits = 64;
  testing_support::SingleEngine server(c);
  auto port = server.engine->listen("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  std::atomic<bool> stop{false};
  std::atomic<int> handled{0};
  std::atomic<std::uint64_t> failed{0};
  ASSERT_TRUE(server.engine
                  ->register_handler(kPut,
                                     [&](Message&) {
                                       std::this_thread::sleep_for(std::chrono::milliseconds(20));
                                       ++handled;
                                     })
                  .ok());
  std::thread serving([&] {
    server.engine->run_until([&] { return stop.load(); }, Clock::now() + kLong);
    failed = server.engine->stats().value("peers.failed");
  });
  auto took = Clock::now();
  {
    testing_support::SingleEngine client(c);
    auto peer = client.engine->connect("127.0.0.1:" + std::to_string(*port));
    ASSERT_TRUE(peer.ok()) << peer.status();
    for (int i = 0; i < kMessages; ++i) {
      Result r;
      while ((r = (*peer)->send_copy(kPut, {}, std::as_bytes(std::span(&i, 1)))) == Result::kWouldBlock)
        client.engine->progress();
      ASSERT_EQ(r, Result::kOk);
    }
    took = Clock::now();
  }  // the client's engine closes here, while the server is still handling the first messages
  auto close_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - took).count();
  // The server goes on until every message is handled, or for 5 s.
  for (auto until = Clock::now() + std::chrono::seconds(5); handled < kMessages && Clock::now() < until;)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  stop_serving_past_the_grace(*server.engine, stop, serving);
  std::printf(
      "%d messages of 20 ms each: the client's close took %lld ms; the server handled %d, counted %llu "
      "failed\n",
      kMessages, static_cast<long long>(close_ms), handled.load(), static_cast<unsigned long long>(failed));
  EXPECT_EQ(handled, kMessages) << "every message sent before the close is handled";
  EXPECT_EQ(failed, 0u) << "an orderly close is not a failure";
  EXPECT_GE(close_ms, 1000) << "the close waited for the server's goodbye, behind 1.2 s of handlers";
}

// A closing client whose server stops for a second (a stopped process, an overloaded host)
// waits for its goodbye rather than failing it for silence at SLUICE_PEER_TIMEOUT (400 ms
// here): the close ends once the server is back and has answered, and neither side counts a
// failure.
TEST_P(ClientServer, AClosingClientWaitsOutAStoppedServerInsteadOfFailingItForSilence) {
  Config c = node_config(GetParam(), "", AuthMode::kAuto, Encrypt::kOff);
  c.heartbeat = std::chrono::milliseconds(100);
  c.peer_timeout = std::chrono::milliseconds(400);
  testing_support::SingleEngine server(c);
  auto port = server.engine->listen("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  std::atomic<bool> stop{false}, hold{false};
  std::atomic<int> handled{0};
  std::atomic<std::uint64_t> failed{0};
  ASSERT_TRUE(server.engine->register_handler(kPut, [&](Message&) { ++handled; }).ok());
  std::thread serving([&] {
    while (!stop) {
      if (hold) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      else server.engine->run_until([&] { return stop || hold; }, Clock::now() + std::chrono::milliseconds(10));
    }
    failed = server.engine->stats().value("peers.failed");
  });
  long long close_ms = 0;
  {
    testing_support::SingleEngine client(c);
    auto peer = client.engine->connect("127.0.0.1:" + std::to_string(*port));
    ASSERT_TRUE(peer.ok()) << peer.status();
    int v = 1;
    ASSERT_EQ((*peer)->send_copy(kPut, {}, std::as_bytes(std::span(&v, 1))), Result::kOk);
    ASSERT_TRUE(client.engine->run_until([&] { return handled == 1; }, Clock::now() + kLong));
    hold = true;  // the server stops for a second
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::thread back([&] {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      hold = false;
    });
    ASSERT_EQ((*peer)->send_copy(kPut, {}, std::as_bytes(std::span(&v, 1))), Result::kOk);
    auto t0 = Clock::now();
    client.engine.reset();  // the close, while the server is stopped
    close_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    back.join();
  }
  stop_serving_past_the_grace(*server.engine, stop, serving);
  std::printf(
      "a server stopped for 1 s: the client's close took %lld ms; the server handled %d of 2, counted %llu "
      "failed\n",
      close_ms, handled.load(), static_cast<unsigned long long>(failed));
  EXPECT_GE(close_ms, 800) << "the close waited for the stopped server (it fails silent peers at 400 ms)";
  EXPECT_EQ(handled, 2) << "the message sent before the close was handled";
  EXPECT_EQ(failed, 0u);
}

// ListenOptions::share_port: two engines of one process on one port each serve some of 16
// clients (the kernel spreads them by source port; all on one engine: 2 in 65,536); an engine
// that does not share the port cannot listen there, and its error says how to.
TEST_P(ClientServer, EnginesSharingAPortEachServeSomeOfItsClients) {
  Node server(GetParam());
  auto second = server.context->create_engine();
  ASSERT_TRUE(second.ok()) << second.status();
  Engine* engines[2] = {server.engine.get(), second->get()};
  int served[2] = {0, 0};  // each by its engine's thread
  int port = 0;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(engines[i]
                    ->register_handler(kGet,
                                       [&served, i](Message& m) {
                                         ++served[i];
                                         EXPECT_EQ(m.reply_copy({}, m.payload()), Result::kOk);
                                       })
                    .ok());
    auto p = engines[i]->listen("127.0.0.1:" + std::to_string(port), {.share_port = true});
    ASSERT_TRUE(p.ok()) << p.status();
    port = *p;
  }
  auto lone = server.context->create_engine();
  ASSERT_TRUE(lone.ok());
  auto refused = (*lone)->listen("127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), ::testing::HasSubstr("share_port"));

  std::atomic<bool> stop{false};
  std::vector<std::thread> serving;
  for (Engine* e : engines)
    serving.emplace_back([&stop, e] { e->run_until([&] { return stop.load(); }, Clock::now() + kLong); });
  constexpr int kClients = 16;
  Node clients(GetParam());
  for (int c = 0; c < kClients; ++c) {
    auto e = clients.context->create_engine();
    ASSERT_TRUE(e.ok()) << e.status();
    auto peer = (*e)->connect("127.0.0.1:" + std::to_string(port));
    ASSERT_TRUE(peer.ok()) << peer.status();
    bool done = false;
    std::uint64_t n = c;
    ASSERT_EQ((*peer)->call_copy(kGet, {}, std::as_bytes(std::span(&n, 1)), {},
                                 [&](const absl::Status& s, Message& reply) {
                                   EXPECT_TRUE(s.ok()) << s;
                                   EXPECT_EQ(reply.payload().size(), sizeof(n));
                                   done = true;
                                 }),
              Result::kOk);
    ASSERT_TRUE((*e)->run_until([&] { return done; }, Clock::now() + kLong));
  }
  stop = true;
  for (Engine* e : engines) e->post([] {});
  for (auto& t : serving) t.join();
  std::printf("16 clients on one port: %d served by the first engine, %d by the second\n", served[0], served[1]);
  EXPECT_EQ(served[0] + served[1], kClients);
  EXPECT_GT(served[0], 0);
  EXPECT_GT(served[1], 0);
}

INSTANTIATE_TEST_SUITE_P(Transports, ClientServer, ::testing::Values("shm", "stream"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace sluice
