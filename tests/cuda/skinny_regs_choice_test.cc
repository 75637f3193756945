// Which decode GEMM launches take the wgmma kernel (skinny_regs_choice.h): the plans' table, and DUET_SKINNY_REGS's
// text as the measurements write it. No GPU needed: the choice is host code.
#include "backend/cuda/skinny_regs_choice.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace duet::backend::cuda
