// An unknown SLUICE_* variable is warned about once, with the closest known name. Its own
// process: the warning is once per process.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sluice/config.h>

namespace sluice {
namespace {

TEST(UnknownVariable, WarnedOnceWithSuggestion) {
  ScopedConfigOverride typo("SLUICE_CREDIT", "3");
  char path[] = "/tmp/sluice-unknown-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  auto first = Config::from_env();
  auto second = Config::from_env();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  unlink(path);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(second.ok());
  std::string log = ss.str();
  EXPECT_THAT(log, ::testing::HasSubstr("unknown variable SLUICE_CREDIT (did you mean SLUICE_CREDITS?)"));
  EXPECT_EQ(log.find("unknown variable"), log.rfind("unknown variable")) << "warned more than once:\n" << log;
}

}  // namespace
}  // namespace sluice
