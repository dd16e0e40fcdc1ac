// Configuration: parsers for every type, errors that name the variable, unknown-variable
// warnings with a suggestion, scoped overrides, cross-field checks, UCX transport lists.
#include <csignal>
#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sluice/config.h>

#include "core/config_table.h"
#include "core/fault.h"
#include "core/tls.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

TEST(ParseSize, AcceptsUnits) {
  EXPECT_EQ(*parse_size("512"), 512u);
  EXPECT_EQ(*parse_size("8K"), 8192u);
  EXPECT_EQ(*parse_size("8k"), 8192u);
  EXPECT_EQ(*parse_size("4M"), 4u << 20);
  EXPECT_EQ(*parse_size("1G"), 1u << 30);
  EXPECT_EQ(*parse_size("2KB"), 2048u);
  EXPECT_EQ(*parse_size("2KiB"), 2048u);
  EXPECT_EQ(*parse_size("1.5K"), 1536u);
  EXPECT_EQ(*parse_size(" 64 "), 64u);
}

TEST(ParseSize, RejectsBadValues) {
  for (const char* bad : {"", "-1", "4X", "1.5.3", "K", "abc", "99999999999999999999", "16777216T", "0.3"}) {
    EXPECT_FALSE(parse_size(bad).ok()) << bad;
  }
}

TEST(ParseDuration, AcceptsUnits) {
  EXPECT_EQ(*parse_duration("500ns"), std::chrono::nanoseconds(500));
  EXPECT_EQ(*parse_duration("10us"), std::chrono::microseconds(10));
  EXPECT_EQ(*parse_duration("5ms"), std::chrono::milliseconds(5));
  EXPECT_EQ(*parse_duration("2s"), std::chrono::seconds(2));
  EXPECT_EQ(*parse_duration("1.5s"), std::chrono::milliseconds(1500));
  EXPECT_EQ(*parse_duration("1m"), std::chrono::seconds(60));
}

TEST(ParseDuration, RejectsBadValues) {
  for (const char* bad : {"", "10", "-1s", "4X", "1.5.3s", "s", "1e3s", "999999999999m"}) {
    EXPECT_FALSE(parse_duration(bad).ok()) << bad;
  }
}

TEST(ParseBool, AcceptsEverySpelling) {
  for (const char* t : {"y", "yes", "1", "on", "true", "YES", "On"}) EXPECT_TRUE(*parse_bool(t)) << t;
  for (const char* f : {"n", "no", "0", "off", "false", "NO"}) EXPECT_FALSE(*parse_bool(f)) << f;
  for (const char* bad : {"", "2", "maybe", "yess"}) EXPECT_FALSE(parse_bool(bad).ok()) << bad;
}

TEST(Config, DefaultsAreValid) {
  Config c;
  EXPECT_TRUE(c.validate().ok());
  EXPECT_EQ(c.eager_limit(), 8192u);
}

TEST(Config, ReadsOverrides) {
  ScopedConfigOverride credits("SLUICE_CREDITS", "64");
  ScopedConfigOverride eager("SLUICE_EAGER_MAX", "4K");
  ScopedConfigOverride timeout("SLUICE_PEER_TIMEOUT", "inf");
  ScopedConfigOverride numa("SLUICE_NUMA", "0");
  auto c = Config::from_env();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->credits, 64u);
  EXPECT_EQ(c->eager_limit(), 4096u);
  EXPECT_EQ(c->peer_timeout, kInfinite);
  EXPECT_EQ(c->numa.kind, NumaPolicy::Kind::kNode);
  EXPECT_EQ(c->numa.node, 0);
}

// A renamed variable is refused with its new name, never silently ignored.
TEST(Config, ARenamedVariableIsRefusedNamingItsNewName) {
  ScopedConfigOverride old_name("SLUICE_RPC_SLOTS", "8");
  auto c = Config::from_env();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("SLUICE_RPC_SLOTS was renamed SLUICE_RPC_WINDOW"));
  ScopedConfigOverride new_name("SLUICE_RPC_WINDOW", "8");
  ScopedConfigOverride old_unset("SLUICE_RPC_SLOTS", std::nullopt);
  c = Config::from_env();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rpc_window, 8u);
}

TEST(Config, BadValueNamesVariableValueAndWhatIsAllowed) {
  struct Case {
    const char* name;
    const char* value;
    const char* allowed;
  };
  for (const Case& k : {Case{"SLUICE_CREDITS", "1", "int [2, 65535]"},
                        Case{"SLUICE_CREDITS", "70000", "int [2, 65535]"},
                        Case{"SLUICE_CREDITS", "abc", "int"},
                        Case{"SLUICE_SEND_POOL_MAX", "4X", "size"},
                        Case{"SLUICE_PEER_TIMEOUT", "10", "duration"},
                        Case{"SLUICE_STATS", "maybe", "bool"},
                        Case{"SLUICE_LOG_LEVEL", "loud", "error|warn|info|debug|trace"},
                        Case{"SLUICE_HUGEPAGES", "always", "try|yes|no"},
                        Case{"SLUICE_NUMA", "-1", "auto | nic"},
                        Case{"SLUICE_RECV_POOL_MAX", "0", "size"},
                        Case{"SLUICE_BOOT", "magic", "auto"},
                        Case{"SLUICE_POOL_CLASSES", "64K,x", "list of sizes"},
                        Case{"SLUICE_FAULT_AT", "rndv", "rndv-announce"},
                        Case{"SLUICE_FAULT_AT", "hello:0", "NAME[:N]"},
                        Case{"SLUICE_FAULT_AT", "hello:x", "NAME[:N]"},
                        Case{"SLUICE_STATS_TRIGGER", "sometimes", "timer:DURATION"},
                        Case{"SLUICE_STATS_TRIGGER", "timer:5ms", "below 10ms"},
                        Case{"SLUICE_STATS_TRIGGER", "signal:HUP", "signal:USR1"},
                        Case{"SLUICE_STATS_DEST", "file:", "file:PATH"},
                        Case{"SLUICE_STATS_DEST", "syslog", "stderr | file:PATH"}}) {
    ScopedConfigOverride o(k.name, k.value);
    auto c = Config::from_env();
    ASSERT_FALSE(c.ok()) << k.name << "=" << k.value;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    std::string msg(c.status().message());
    EXPECT_THAT(msg, HasSubstr(std::string(k.name) + "=" + k.value)) << msg;
    EXPECT_THAT(msg, HasSubstr(k.allowed)) << msg;
  }
}

TEST(Config, StatsTriggersCombineAndPrintBack) {
  ScopedConfigOverride trigger("SLUICE_STATS_TRIGGER", " Signal:USR2, timer:1500ms ,exit");
  ScopedConfigOverride dest("SLUICE_STATS_DEST", "file:/tmp/stats-%h-%p.jsonl");
  auto c = Config::from_env();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->stats_trigger.at_exit);
  EXPECT_EQ(c->stats_trigger.signal, SIGUSR2);
  EXPECT_EQ(c->stats_trigger.every, std::chrono::milliseconds(1500));
  EXPECT_EQ(c->stats_dest, "file:/tmp/stats-%h-%p.jsonl");
  std::string shown;
  for (const auto& v : describe(*c))
    if (v.name == "SLUICE_STATS_TRIGGER") shown = v.value;
  EXPECT_EQ(shown, "signal:USR2,timer:1500ms,exit");
  ScopedConfigOverride none("SLUICE_STATS_TRIGGER", "none");
  auto off = Config::from_env();
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->stats_trigger.any());
}

TEST(Config, FaultPointNamesAndCounts) {
  for (const char* v : {"hello", "rndv-announce", "rndv-payload:3", "rndv-land", "credit-return:12"}) {
    ScopedConfigOverride o("SLUICE_FAULT_AT", v);
    ASSERT_TRUE(Config::from_env().ok()) << v;  // checked with the rest, kept out of Config
    auto env = detail::ProcessEnv::from_env();
    ASSERT_TRUE(env.ok()) << v << ": " << env.status();
    EXPECT_EQ(env->fault_at, v);
  }
  auto spec = sluice::detail::parse_fault_at("rndv-payload:3");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->point, sluice::detail::FaultPoint::kRndvPayload);
  EXPECT_EQ(spec->nth, 3u);
  EXPECT_EQ(sluice::detail::parse_fault_at("")->point, sluice::detail::FaultPoint::kNone);
}

TEST(Config, TheLaunchersVariablesAreCheckedButDescribeTheProcess) {
  ScopedConfigOverride rank("SLUICE_RANK", "3"), size("SLUICE_SIZE", "2");
  for (const absl::Status& s : {Config::from_env().status(), detail::ProcessEnv::from_env().status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("SLUICE_RANK=3 is not below SLUICE_SIZE=2"));
  }
  {
    ScopedConfigOverride ok("SLUICE_RANK", "1"), local("SLUICE_LOCAL_SIZE", "3");
    absl::Status s = detail::ProcessEnv::from_env().status();
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("SLUICE_LOCAL_SIZE=3 is above SLUICE_SIZE=2"));
  }
  ScopedConfigOverride ok("SLUICE_RANK", "1"), addr("SLUICE_BOOT_ADDR", "/tmp/x.sock");
  auto env = detail::ProcessEnv::from_env();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 1);
  EXPECT_EQ(env->size, 2);
  EXPECT_EQ(env->boot_addr, "/tmp/x.sock");
  // sluice-info -c shows them beside the application's settings.
  std::map<std::string, std::string> shown;
  for (const auto& v : describe(Config())) shown[v.name] = v.value;
  EXPECT_EQ(shown["SLUICE_RANK"], "1");
  EXPECT_EQ(shown["SLUICE_BOOT_ADDR"], "/tmp/x.sock");
}

TEST(Config, CrossFieldChecksNameBothVariables) {
  {
    ScopedConfigOverride pool("SLUICE_RECV_POOL_MAX", "4K");
    auto c = Config::from_env();
    ASSERT_FALSE(c.ok());
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("SLUICE_RECV_POOL_MAX=4K is smaller than one eager slot"));
  }
  {
    ScopedConfigOverride cls("SLUICE_POOL_CLASSES", "4K,1M");
    auto c = Config::from_env();
    ASSERT_FALSE(c.ok());
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("SLUICE_EAGER_MAX"));
  }
  {
    ScopedConfigOverride hb("SLUICE_HEARTBEAT", "5s");
    ScopedConfigOverride pt("SLUICE_PEER_TIMEOUT", "2s");
    auto c = Config::from_env();
    ASSERT_FALSE(c.ok());
    EXPECT_THAT(std::string(c.status().message()),
                HasSubstr("SLUICE_HEARTBEAT=5s must be shorter than SLUICE_PEER_TIMEOUT=2s"));
  }
  {
    // A budget below the growth chunk is valid: the pool maps the budget in one piece (a
    // budget too small for the peers' credits is the engine's to report, naming the budget).
    ScopedConfigOverride recv("SLUICE_RECV_POOL_MAX", "64K");
    EXPECT_TRUE(Config::from_env().ok());
  }
}

TEST(ScopedConfigOverride, RestoresThePreviousValue) {
  {
    ScopedConfigOverride outer("SLUICE_CREDITS", "40");
    {
      ScopedConfigOverride inner("SLUICE_CREDITS", "50");
      EXPECT_EQ(Config::from_env()->credits, 50u);
    }
    EXPECT_EQ(Config::from_env()->credits, 40u);
    {
      ScopedConfigOverride unset("SLUICE_CREDITS", std::nullopt);
      EXPECT_EQ(Config::from_env()->credits, 32u);
    }
    EXPECT_EQ(Config::from_env()->credits, 40u);
  }
  EXPECT_EQ(Config::from_env()->credits, 32u);
}

TEST(ConfigTable, SuggestsTheClosestName) {
  EXPECT_EQ(detail::closest_config_name("SLUICE_CREDIT"), "SLUICE_CREDITS");
  EXPECT_EQ(detail::closest_config_name("SLUICE_EAGERMAX"), "SLUICE_EAGER_MAX");
  EXPECT_EQ(detail::closest_config_name("SLUICE_RECV_POOL_SIZE"), "SLUICE_RECV_POOL_MAX");
}

TEST(ConfigTable, DeclaresEveryVariableOfTheDesign) {
  std::vector<std::string> names;
  for (const auto& v : describe(Config())) names.push_back(v.name);
  for (const char* want :
       {"SLUICE_LOG_LEVEL", "SLUICE_STATS", "SLUICE_EAGER_MAX", "SLUICE_RNDV", "SLUICE_CREDITS", "SLUICE_RX_POSTED",
        "SLUICE_SEND_POOL_MAX", "SLUICE_RECV_POOL_MAX", "SLUICE_POOL_CHUNK", "SLUICE_HUGEPAGES", "SLUICE_NUMA",
        "SLUICE_SEND_QUEUE_MAX", "SLUICE_RPC_WINDOW", "SLUICE_PEER_TIMEOUT", "SLUICE_HEARTBEAT",
        "SLUICE_CONNECT_TIMEOUT", "SLUICE_TLS", "SLUICE_BOOT"}) {
    EXPECT_THAT(names, ::testing::Contains(want));
  }
  for (const auto& v : describe(Config())) {
    EXPECT_FALSE(v.doc.empty()) << v.name;
    EXPECT_FALSE(v.type.empty()) << v.name;
  }
}

TEST(ConfigTable, PrintedDefaultsParseBackToTheDefaults) {
  detail::Settings defaults;
  for (const auto& v : detail::config_table()) {
    detail::Settings c;
    ASSERT_TRUE(v.parse(v.default_value, c).ok()) << v.name << "=" << v.default_value;
    EXPECT_EQ(v.show(c), v.show(defaults)) << v.name;
  }
}

// SLUICE_TLS is read as UCX 1.13 reads UCX_TLS: an alias stands for its transports, "^" for
// every transport but those named, empty or "all" for UCX's choice.
TEST(TlsList, AliasesStandForTheirTransports) {
  for (const char* shm : {"shm", "sm", "SHM", " sm , tcp "}) {
    detail::TlsList list(shm);
    for (const char* t : {"sysv", "posix", "cma", "knem", "xpmem"}) EXPECT_TRUE(list.may_use(t)) << shm << " " << t;
    EXPECT_FALSE(list.may_use("rc_verbs")) << shm;
    EXPECT_EQ(list.may_use("tcp"), std::string_view(shm).find("tcp") != std::string_view::npos) << shm;
  }
  detail::TlsList mm("mm");
  EXPECT_TRUE(mm.may_use("sysv") && mm.may_use("posix"));
  EXPECT_FALSE(mm.may_use("cma") || mm.may_use("tcp"));
  detail::TlsList not_sm("^sm");
  EXPECT_FALSE(not_sm.may_use("sysv") || not_sm.may_use("posix") || not_sm.may_use("cma"));
  EXPECT_TRUE(not_sm.may_use("tcp") && not_sm.may_use("self"));
  detail::TlsList not_tcp("^tcp");
  EXPECT_TRUE(not_tcp.may_use("sysv") && not_tcp.may_use("cma"));
  EXPECT_FALSE(not_tcp.may_use("tcp"));
  for (const char* any : {"", "all", " ALL "}) {
    EXPECT_TRUE(detail::TlsList(any).any()) << any;
    EXPECT_TRUE(detail::TlsList(any).may_use("sysv") && detail::TlsList(any).may_use("tcp")) << any;
  }
  EXPECT_TRUE(detail::TlsList("\\sysv,rc:aux").may_use("sysv"));  // UCX's strict name and auxiliary forms
  EXPECT_EQ(detail::TlsList(" SHM , TCP ").str(), "shm,tcp");
}

TEST(TlsList, WithoutTcpTakesItOutOrExcludesIt) {
  const std::map<std::string, std::string> want = {
      {"shm,tcp", "shm"}, {"tcp,sysv,cma", "sysv,cma"}, {"tcp", "^tcp"},  {"", "^tcp"},
      {"all", "^tcp"},    {"^sm", "^sm,tcp"},           {"^tcp", "^tcp"}, {"^tcp,cma", "^tcp,cma"}};
  for (const auto& [tls, without] : want) EXPECT_EQ(detail::TlsList(tls).without("tcp").str(), without) << tls;
}

// SLUICE_UCX_TCP=auto: UCX's TCP in a job whose ranks may be on other hosts (the launcher did
// not say, or said fewer than all here), or whose list names tcp itself; never with one rank.
TEST(TlsList, AutoUcxTcpOnlyWhereARankMayBeElsewhereOrTheListNamesTcp) {
  struct Case {
    const char* tls;
    int size, local_size;
    bool tcp;
  };
  for (const Case& c :
       {Case{"", 1, 1, false}, Case{"tcp", 1, 1, false}, Case{"", 4, 4, false}, Case{"shm", 4, 4, false},
        Case{"^cma", 4, 4, false}, Case{"^tcp", 4, 4, false}, Case{"tcp", 4, 4, true}, Case{"shm,tcp", 4, 4, true},
        Case{"", 4, 0, true}, Case{"", 4, 2, true}, Case{"^tcp", 4, 2, true}, Case{"shm", 2, 1, true}}) {
    EXPECT_EQ(detail::auto_ucx_tcp(c.tls, c.size, c.local_size), c.tcp)
        << "'" << c.tls << "' " << c.local_size << " of " << c.size;
  }
}

TEST(TlsList, UnknownNamesAndListsWithoutSharedMemoryAreRefusedByConfig) {
  for (const char* good : {"shm", "sm", "mm", "shm,tcp", "sysv", "posix,cma", "tcp", "self,tcp", "^tcp", "^sm", "^mm",
                           "all", "rc", "ib,sm", "\\sysv"}) {
    ScopedConfigOverride tls("SLUICE_TLS", good);
    auto c = Config::from_env();
    EXPECT_TRUE(c.ok()) << good << ": " << c.status();
  }
  {
    ScopedConfigOverride tls("SLUICE_TLS", "foo");
    auto c = Config::from_env();
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    for (const char* part : {"SLUICE_TLS=foo: 'foo' is not a UCX transport or alias", "sysv", "posix", "tcp",
                             "shm (posix,sysv,xpmem,knem,cma)", "mm (posix,sysv,xpmem)", "^LIST"}) {
      EXPECT_THAT(std::string(c.status().message()), HasSubstr(part));
    }
  }
  for (const char* no_shm : {"cma", "self", "knem", "self,cma", "^sm,tcp", "^mm,tcp"}) {
    ScopedConfigOverride tls("SLUICE_TLS", no_shm);
    auto c = Config::from_env();
    ASSERT_FALSE(c.ok()) << no_shm;
    EXPECT_THAT(
        std::string(c.status().message()),
        HasSubstr(std::string("SLUICE_TLS=") + no_shm + ": leaves processes on the same host without shared memory"));
  }
  for (const char* bad : {"sm,,tcp", "shm,", "^", "all,tcp", "tcp;sm"}) {
    ScopedConfigOverride tls("SLUICE_TLS", bad);
    EXPECT_FALSE(Config::from_env().ok()) << bad;
  }
  Config given;  // a Config the application fills in is checked the same way (Context::create)
  given.tls = "foo";
  EXPECT_THAT(std::string(given.validate().message()), HasSubstr("SLUICE_TLS=foo: 'foo' is not a UCX transport"));
}

}  // namespace
}  // namespace sluice
