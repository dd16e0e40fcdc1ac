// Replays a fuzz target's seed corpus (and anything the fuzzer found and was committed)
// through the fuzz target, as an ordinary unit test: runs without clang.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include <gtest/gtest.h>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

TEST(FuzzCorpus, EveryInputParsesSafely) {
  std::filesystem::path dir = SLUICE_CORPUS_DIR;
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    ++n;
  }
  EXPECT_GE(n, 5);
}
