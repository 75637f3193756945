// DUET_PROFILE's tables (op_totals.h): each kind of step's operations apart, with per-step times. No GPU needed: the
// sums are host code (op_timer.cc feeds them the CUDA events' times). The timer's restart needs one (its events).
#include "backend/cuda/op_totals.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/op_timer.h"
#include "cuda_test_util.h"

namespace duet::backend::cuda {
namespace {

// The line of `table` that starts with `name`, split into its whitespace-separated fields after the name.
std::vector<std::string> fields_of(const std::string& table, const std::string& name) {
  const size_t at = table.find("\n" + name + " ");
  if (at == std::string::npos) return {};
  std::istringstream line(table.substr(at + 1 + name.size(), table.find('\n', at + 1) - at - 1 - name.size()));
  std::vector<std::string> fields;
  for (std::string f; line >> f;) fields.push_back(f);
  return fields;
}

TEST(OpTotals, DecodeAndPrefillStepsAreTabledApartWithTheirTimeAStep) {
  OpTotals totals;
  totals.add(StepKind::outside, "embed", 0.5);
  totals.begin_step(StepKind::prefill, 1024);
  totals.add(StepKind::prefill, "gdn.delta_rule", 3.0);
  totals.add(StepKind::prefill, "mlp.gate_proj pinned", 9.0);
  for (int step = 0; step < 4; ++step) {
    totals.begin_step(StepKind::decode, 64);
    totals.add(StepKind::decode, "gdn.delta_rule", 0.25);
    totals.add(StepKind::decode, "gdn.delta_rule", 0.25);
    totals.add(StepKind::decode, "mlp.gate_up_proj skinny", 1.0);
  }
  const std::string report = totals.report();
  const size_t decode = report.find("DUET_PROFILE: decode steps: 4 steps of 64.0 rows on average");
  const size_t prefill = report.find("DUET_PROFILE: steps with prefill rows: 1 steps of 1024.0 rows on average");
  const size_t outside = report.find("DUET_PROFILE: launches outside steps: 0 steps");
  ASSERT_NE(decode, std::string::npos) << report;
  ASSERT_NE(prefill, std::string::npos) << report;
  ASSERT_NE(outside, std::string::npos) << report;
  EXPECT_LT(decode, prefill);
  EXPECT_LT(prefill, outside);
  // Decode: 6 ms in all over 4 steps = 1,500 us a step; gate | up 4 ms = 1,000 us a step, 66.7%, first (largest).
  const std::string decode_table = report.substr(decode, prefill - decode);
  EXPECT_NE(decode_table.find("6.0 ms in all, 1500.0 us a step"), std::string::npos) << decode_table;
  const size_t gate_up = decode_table.find("mlp.gate_up_proj skinny"), delta = decode_table.find("gdn.delta_rule");
  ASSERT_NE(gate_up, std::string::npos);
  ASSERT_NE(delta, std::string::npos);
  EXPECT_LT(gate_up, delta);
  EXPECT_EQ(fields_of(decode_table, "mlp.gate_up_proj skinny"),
            (std::vector<std::string>{"4", "4.00", "1000.0", "66.7%"}));
  EXPECT_EQ(fields_of(decode_table, "gdn.delta_rule"), (std::vector<std::string>{"8", "2.00", "500.0", "33.3%"}));
  // The prefill step's delta rule is not in the decode table's sum, nor the decode steps' in the prefill table's.
  const std::string prefill_table = report.substr(prefill, outside - prefill);
  EXPECT_NE(prefill_table.find("12.0 ms in all, 12000.0 us a step"), std::string::npos) << prefill_table;
  EXPECT_EQ(decode_table.find("pinned"), std::string::npos);
}

TEST(OpTotals, KindsWithoutTimeAreLeftOut) {
  OpTotals totals;
  totals.begin_step(StepKind::decode, 1);
  totals.add(StepKind::decode, "lm_head skinny", 0.1);
  const std::string report = totals.report();
  EXPECT_NE(report.find("decode steps: 1 steps of 1.0 rows"), std::string::npos) << report;
  EXPECT_EQ(report.find("prefill"), std::string::npos) << report;
  EXPECT_EQ(report.find("outside"), std::string::npos) << report;
  EXPECT_EQ(OpTotals().report(), "");
}

// OpTimer::restart (Backend::restart_measurements, called by `duet run` after its warm-up passes): an operation timed
// before it is not in the tables printed at the end, one timed after it is. The control: without the restart both are.
TEST(OpTimer, RestartDropsWhatWasTimedBefore) {
  DUET_REQUIRE_GPU();
  const char* before = std::getenv("DUET_PROFILE");
  const std::string saved = before != nullptr ? before : "";
  setenv("DUET_PROFILE", "1", 1);
  auto tables = [](bool restart) {
    ::testing::internal::CaptureStderr();
    {
      OpTimer timer;
      timer.begin_step(StepKind::prefill, 8);
      timer.time("warm.up_op", nullptr, [] {});
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      if (restart) timer.restart();
      timer.begin_step(StepKind::prefill, 8);
      timer.time("timed.op", nullptr, [] {});
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }  // the tables are printed here
    return ::testing::internal::GetCapturedStderr();
  };
  const std::string restarted = tables(true), whole = tables(false);
  if (before != nullptr) {
    setenv("DUET_PROFILE", saved.c_str(), 1);
  } else {
    unsetenv("DUET_PROFILE");
  }
  EXPECT_NE(restarted.find("timed.op"), std::string::npos) << restarted;
  EXPECT_EQ(restarted.find("warm.up_op"), std::string::npos) << restarted;
  EXPECT_NE(restarted.find("steps with prefill rows: 1 steps"), std::string::npos) << restarted;
  EXPECT_NE(whole.find("warm.up_op"), std::string::npos) << whole;
  EXPECT_NE(whole.find("steps with prefill rows: 2 steps"), std::string::npos) << whole;
}

}  // namespace
}  // namespace duet::backend::cuda
