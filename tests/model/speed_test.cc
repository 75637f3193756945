// Performance sanity: a 300-token prefill of each tiny fixture takes well under a second on a small CPU machine,
// and decode steps take milliseconds. Times are printed for the issue note.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "golden_fixtures.h"
#include "model/model.h"

namespace duet::model {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(Speed, PrefillOf300TokensIsWellUnderASecond) {
  for (const std::string name : {"tiny-mm", "tiny-text"}) {
    auto model = Model::load(testing::model_fixture(name));
    const auto ids = testing::Goldens(testing::golden_fixture(name, "fp32")).i32("len300.ids");
    auto state = model->new_sequence_state(static_cast<int32_t>(ids.size()) + 32);
    auto start = std::chrono::steady_clock::now();
    Piece prefill{state.get(), ids, RowOutput::last_logits};
    model->forward({&prefill, 1});
    const double prefill_s = seconds_since(start);
    start = std::chrono::steady_clock::now();
    for (int32_t i = 0; i < 32; ++i) {
      Piece step{state.get(), {&ids[i], 1}, RowOutput::last_logits};
      model->forward({&step, 1});
    }
    const double decode_s = seconds_since(start) / 32;
    std::printf("%s: prefill 300 tokens %.1f ms, decode %.2f ms/token\n", name.c_str(), prefill_s * 1e3,
                decode_s * 1e3);
    EXPECT_LT(prefill_s, 1.0) << name;
    EXPECT_LT(decode_s, 0.1) << name;
  }
}

}  // namespace
}  // namespace duet::model
