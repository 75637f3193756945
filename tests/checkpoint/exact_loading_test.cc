// Exact loading: F32 linear_attn.A_log and linear_attn.norm.weight (as stock Qwen3.5 checkpoints store them) are
// used as stored. The fixture's values are not representable in BF16; rounding them to BF16 in a copy of the
// checkpoint must change the outputs, which shows the forward pass reads every bit.
#include <gtest/gtest.h>

#include "checkpoint/checkpoint.h"
#include "damaged_copies.h"
#include "engine/piece_runner.h"
#include "model/model.h"

namespace duet::model {
namespace {

using testing::DamagedCopy;

std::vector<float> logits_of(const std::string& folder) {
  auto model = Model::load(folder);
  std::vector<int32_t> ids{5, 17, 300, 2, 99, 511, 64, 8};
  engine::PieceRunner runner(*model, 1, static_cast<int32_t>(ids.size()));
  return runner.run(Piece{.slot = runner.open(), .tokens = ids, .wants = RowOutput::all_logits})[0].logits;
}

TEST(ExactLoading, F32GdnTensorsAreStoredUnroundedAndUsedAsStored) {
  DamagedCopy copy("tiny-mm");
  const auto checkpoint = checkpoint::Checkpoint::open(copy.folder());
  for (const std::string suffix : {"linear_attn.A_log", "linear_attn.norm.weight"}) {
    const std::string name = "model.language_model.layers.0." + suffix;
    const auto* tensor = checkpoint.find(name);
    ASSERT_NE(tensor, nullptr) << name;
    EXPECT_EQ(tensor->dtype, checkpoint::DType::f32) << name;
    bool any_unrounded = false;
    for (int64_t i = 0; i < tensor->element_count(); ++i)
      any_unrounded = any_unrounded || round_to_bf16(tensor->data<float>()[i]) != tensor->data<float>()[i];
    EXPECT_TRUE(any_unrounded) << name << " holds bf16 values: the fixture would not test exact loading";
  }

  const auto exact = logits_of(copy.folder());
  for (const std::string suffix : {"linear_attn.A_log", "linear_attn.norm.weight"}) {
    DamagedCopy rounded("tiny-mm");
    const std::string name = "model.language_model.layers.0." + suffix;
    rounded.round_f32_tensor_to_bf16(name);
    const auto after = logits_of(rounded.folder());
    EXPECT_NE(std::memcmp(exact.data(), after.data(), exact.size() * sizeof(float)), 0)
        << "rounding " << name << " to bf16 did not change the logits";
  }
}

}  // namespace
}  // namespace duet::model
