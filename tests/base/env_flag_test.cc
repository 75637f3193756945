// The environment's switches and name lists, as the measurement switches read them (DUET_PROFILE=1,
// DUET_CUDA_SKIP_OPS=a,b, ...).
#include "base/env_flag.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace duet {
namespace {

constexpr const char* kName = "DUET_ENV_FLAG_TEST_VALUE";

TEST(EnvFlag, OnWhenSetNotEmptyAndNotZero) {
  unsetenv(kName);
  EXPECT_FALSE(env_flag(kName));
  for (const char* off : {"", "0"}) {
    setenv(kName, off, 1);
    EXPECT_FALSE(env_flag(kName)) << "'" << off << "'";
  }
  for (const char* on : {"1", "yes", "00"}) {
    setenv(kName, on, 1);
    EXPECT_TRUE(env_flag(kName)) << "'" << on << "'";
  }
  unsetenv(kName);
}

TEST(EnvList, CommaSeparatedNamesWithoutEmptyOnes) {
  unsetenv(kName);
  EXPECT_TRUE(env_list(kName).empty());
  const std::vector<std::pair<const char*, std::vector<std::string>>> cases = {
      {"", {}},
      {"a", {"a"}},
      {"gdn.conv_gates,attn.prep", {"gdn.conv_gates", "attn.prep"}},
      {",a,,b,", {"a", "b"}},
      {"a b,c", {"a b", "c"}},
  };
  for (const auto& [value, want] : cases) {
    setenv(kName, value, 1);
    EXPECT_EQ(env_list(kName), want) << "'" << value << "'";
  }
  unsetenv(kName);
}

}  // namespace
}  // namespace duet
