// tests_dir() (tests/tests_dir.h): the run-time override wins over the path compiled in, and an unset or empty
// override falls back to it. tests/moved_checkout_test.sh shows the same on a real fixture-reading binary.
#include "../tests_dir.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <optional>
#include <string>

namespace duet::testing {
namespace {

// Sets (or, with nullopt, unsets) DUET_TESTS_DIR_OVERRIDE for one test and puts the caller's value back after.
class OverrideScope {
 public:
  explicit OverrideScope(const std::optional<std::string>& value) {
    if (const char* old = getenv(kName)) saved_ = old;
    if (value)
      setenv(kName, value->c_str(), 1);
    else
      unsetenv(kName);
  }
  ~OverrideScope() {
    if (saved_)
      setenv(kName, saved_->c_str(), 1);
    else
      unsetenv(kName);
  }

 private:
  static constexpr const char* kName = "DUET_TESTS_DIR_OVERRIDE";
  std::optional<std::string> saved_;
};

TEST(TestsDir, IsTheCompiledPathWithoutAnOverride) {
  OverrideScope scope(std::nullopt);
  EXPECT_EQ(tests_dir(), DUET_TESTS_DIR);
}

TEST(TestsDir, TheOverrideWins) {
  OverrideScope scope("/elsewhere/duet/tests");
  EXPECT_EQ(tests_dir(), "/elsewhere/duet/tests");
  EXPECT_NE(tests_dir(), DUET_TESTS_DIR);
}

TEST(TestsDir, AnEmptyOverrideFallsBack) {
  OverrideScope scope("");
  EXPECT_EQ(tests_dir(), DUET_TESTS_DIR);
}

}  // namespace
}  // namespace duet::testing
