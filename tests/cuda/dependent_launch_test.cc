// The dependent-launch policy (dependent_launch.h): a step's launches are dependent ones up to kDependentLaunchMaxRows
// rows and in plain stream order above, per thread, so that a step thread's choice never reaches another thread's
// launches (the decision head's, the vision tower's). No GPU needed: the attribute is what each launch passes.
#include "backend/cuda/dependent_launch.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

namespace duet::backend::cuda {
namespace {

bool dependent_now() { return dependent_launch_attribute("a kernel").val.programmaticStreamSerializationAllowed != 0; }

TEST(DependentLaunch, StepsOverTheLimitLaunchInStreamOrderOnTheirThreadOnly) {
  if (std::getenv("DUET_CUDA_PDL") != nullptr || std::getenv("DUET_CUDA_PDL_MAX_ROWS") != nullptr ||
      std::getenv("DUET_CUDA_PDL_FLIP") != nullptr)
    GTEST_SKIP()
        << "DUET_CUDA_PDL, DUET_CUDA_PDL_MAX_ROWS or DUET_CUDA_PDL_FLIP is set: the policy is forced for measurements";
  EXPECT_EQ(dependent_launch_attribute("a kernel").id, cudaLaunchAttributeProgrammaticStreamSerialization);
  EXPECT_TRUE(dependent_now()) << "a thread before its first step";
  set_dependent_launch_for_step(1);
  EXPECT_TRUE(dependent_now());
  set_dependent_launch_for_step(kDependentLaunchMaxRows);
  EXPECT_TRUE(dependent_now());
  set_dependent_launch_for_step(kDependentLaunchMaxRows + 1);
  EXPECT_FALSE(dependent_now());
  bool other = false;
  std::thread([&] { other = dependent_now(); }).join();
  EXPECT_TRUE(other) << "another thread's launches followed this thread's step";
  set_dependent_launch_for_step(4096);  // a prefill chunk
  EXPECT_FALSE(dependent_now());
  EXPECT_FALSE(dependent_launch_for_rows(64));
  EXPECT_TRUE(dependent_launch_for_rows(16));
  set_dependent_launch_for_step(1);  // as the next test expects a thread to start
  EXPECT_TRUE(dependent_now());
}

// DUET_CUDA_PDL_FLIP inverts the step's choice for the kernels whose launch name holds one of its names, read once a
// process: checked in a child process (a death test, re-executed with the variable set). Control: a kernel it does
// not name keeps the step's choice, at 64 rows and at 1.
TEST(DependentLaunch, FlipInvertsTheChoiceForTheNamedKernelsOnly) {
  if (std::getenv("DUET_CUDA_PDL") != nullptr || std::getenv("DUET_CUDA_PDL_MAX_ROWS") != nullptr)
    GTEST_SKIP() << "DUET_CUDA_PDL or DUET_CUDA_PDL_MAX_ROWS is set: the policy is forced for measurements";
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  setenv("DUET_CUDA_PDL_FLIP", "skinny,,decode_delta", 1);
  const auto dependent = [](const char* what) {
    return dependent_launch_attribute(what).val.programmaticStreamSerializationAllowed != 0;
  };
  EXPECT_EXIT(
      {
        set_dependent_launch_for_step(64);
        const bool large = dependent("launch_skinny_gemm (tensor cores)") && dependent("decode_delta_kernel") &&
                           !dependent("rms_norm_kernel");
        set_dependent_launch_for_step(1);
        const bool small = !dependent("launch_skinny_gemm (tensor cores)") && dependent("rms_norm_kernel");
        std::exit(large && small ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  unsetenv("DUET_CUDA_PDL_FLIP");
}

}  // namespace
}  // namespace duet::backend::cuda
