#pragma once
// Which decode GEMM launches take the wgmma kernel with the weights in registers (skinny_gemm.cu,
// skinny_gemm_regs_kernel): the same bits as the mma.sync kernel, so the choice only moves time. The plans' table
// (skinny_regs_choice.cc, with its measurements), or DUET_SKINNY_REGS for measurements on one binary.
#include <cstdint>

namespace duet::backend::cuda {

struct SkinnyRegsEntry {
  int32_t n = 0, k = 0, min_rows = 0;  // launches of the [n, k] weight with at least min_rows rows
};

struct SkinnyRegsChoice {
  static constexpr int kMaxEntries = 8;
  int all_from = 0;  // every shape from this many rows (0: none)
  int count = 0;
  SkinnyRegsEntry entries[kMaxEntries] = {};
  bool takes(int32_t n, int32_t k, int32_t rows) const;
};

// The plans' choice.
SkinnyRegsChoice skinny_regs_plans();
// DUET_SKINNY_REGS's text: "none" (no launch), or comma-separated entries "NxK:ROWS" (that shape from ROWS rows on)
// and "all:ROWS" (every shape); an entry it cannot read names nothing. nullptr: the plans.
SkinnyRegsChoice parse_skinny_regs_choice(const char* text);
// The process's choice: DUET_SKINNY_REGS when set, else the plans (read once).
bool skinny_regs_for(int32_t n, int32_t k, int32_t rows);

}  // namespace duet::backend::cuda
