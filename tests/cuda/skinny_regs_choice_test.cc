// Which decode GEMM launches take the wgmma kernel and which weights the TMA engine (skinny_regs_choice.h): the plans'
// tables, and DUET_SKINNY_REGS's and DUET_SKINNY_TMA's texts as the measurements write them. No GPU needed: the
// choice is host code.
#include "backend/cuda/skinny_regs_choice.h"

#include <gtest/gtest.h>

#include <utility>

namespace duet::backend::cuda {
namespace {

TEST(SkinnyRegsChoice, ThePlansTakeTheMeasuredShapesFromTheirRows) {
  const SkinnyRegsChoice plans = parse_skinny_regs_choice(nullptr);
  EXPECT_FALSE(plans.takes(12352, 4096, 24));  // GDN qkv | z | b | a: a tie at 24 rows
  EXPECT_TRUE(plans.takes(12352, 4096, 25));
  EXPECT_TRUE(plans.takes(12352, 4096, 64));
  EXPECT_FALSE(plans.takes(4096, 4096, 15));  // out_proj, o_proj
  EXPECT_TRUE(plans.takes(4096, 4096, 16));
  EXPECT_FALSE(plans.takes(4096, 12288, 24));  // MLP down
  EXPECT_TRUE(plans.takes(4096, 12288, 25));
  for (int32_t rows : {1, 16, 64}) {  // slower with it: gate | up, attention q | k | v, the LM head
    EXPECT_FALSE(plans.takes(24576, 4096, rows));
    EXPECT_FALSE(plans.takes(10240, 4096, rows));
    EXPECT_FALSE(plans.takes(248320, 4096, rows));
  }
}

TEST(SkinnyRegsChoice, TheSwitchReplacesThePlans) {
  const SkinnyRegsChoice none = parse_skinny_regs_choice("none");
  EXPECT_FALSE(none.takes(12352, 4096, 64));
  EXPECT_FALSE(none.takes(4096, 4096, 64));

  const SkinnyRegsChoice some = parse_skinny_regs_choice("12352x4096:25,4096x12288:33");
  EXPECT_TRUE(some.takes(12352, 4096, 25));
  EXPECT_FALSE(some.takes(12352, 4096, 24));
  EXPECT_FALSE(some.takes(4096, 12288, 32));
  EXPECT_TRUE(some.takes(4096, 12288, 33));
  EXPECT_FALSE(some.takes(4096, 4096, 64)) << "a shape the switch does not name, though the plans do";

  const SkinnyRegsChoice all = parse_skinny_regs_choice("all:17");
  EXPECT_FALSE(all.takes(24576, 4096, 16));
  EXPECT_TRUE(all.takes(24576, 4096, 17));
  EXPECT_TRUE(all.takes(248320, 4096, 64));

  // What it cannot read names nothing: no colon, no rows, a shape without its x.
  for (const char* text : {"12352x4096", "12352x4096:", "12352:25", "x:25", "all:0", ""}) {
    const SkinnyRegsChoice c = parse_skinny_regs_choice(text);
    EXPECT_FALSE(c.takes(12352, 4096, 64)) << text;
    EXPECT_FALSE(c.takes(4096, 4096, 64)) << text;
  }
}

TEST(SkinnyTmaChoice, ThePlansGiveItEveryWeightOfThe9BAtEveryRowCount) {
  const SkinnyRegsChoice plans = parse_skinny_tma_choice(nullptr);
  for (int32_t rows : {1, 16, 64}) {
    // GDN qkv | z | b | a, attention q | k | v, MLP gate | up, the LM head, the out projections, MLP down.
    for (const auto& [n, k] : {std::pair{12352, 4096}, std::pair{10240, 4096}, std::pair{24576, 4096},
                               std::pair{248320, 4096}, std::pair{4096, 4096}, std::pair{4096, 12288}})
      EXPECT_TRUE(plans.takes(n, k, rows)) << n << " x " << k;
    // Other models' shapes keep the register-fed plans (not measured on the TMA engine).
    for (const auto& [n, k] : {std::pair{2048, 4096}, std::pair{4096, 2048}, std::pair{1024, 1024}})
      EXPECT_FALSE(plans.takes(n, k, rows)) << n << " x " << k;
  }
}

TEST(SkinnyTmaChoice, TheSwitchReplacesThePlansByShapeAlone) {
  for (const char* none : {"0", "", "none"}) EXPECT_FALSE(parse_skinny_tma_choice(none).takes(12352, 4096, 1)) << none;
  const SkinnyRegsChoice all = parse_skinny_tma_choice("1");
  EXPECT_TRUE(all.takes(248320, 4096, 1));
  EXPECT_TRUE(all.takes(4096, 4096, 64));
  const SkinnyRegsChoice some = parse_skinny_tma_choice("4096x12288,24576x4096");
  EXPECT_TRUE(some.takes(4096, 12288, 1));
  EXPECT_TRUE(some.takes(24576, 4096, 64));
  EXPECT_FALSE(some.takes(12352, 4096, 64)) << "a shape the switch does not name, though the plans do";
  // No row bound: an engine by rows would give a weight's products two sets of bits. A shape with one is unreadable.
  EXPECT_FALSE(parse_skinny_tma_choice("4096x12288:25").takes(4096, 12288, 64));
  for (const char* text : {"12352", "x4096", "12352x", "all"})
    EXPECT_FALSE(parse_skinny_tma_choice(text).takes(12352, 4096, 64)) << text;
}

}  // namespace
}  // namespace duet::backend::cuda
