#pragma once
// Which kernel a decode GEMM launch takes. The wgmma kernel with the weights in registers (skinny_gemm.cu,
// skinny_gemm_regs_kernel) gives the mma.sync kernel's bits, so it is chosen by shape and rows and only moves time.
// The TMA engine (skinny_gemm_tma.cu) gives bits of its own, so it is chosen by shape alone: a weight takes it at every
// row count or at none (a row's products must not depend on the batch). The plans' tables (skinny_regs_choice.cc,
// with their measurements), or DUET_SKINNY_REGS / DUET_SKINNY_TMA for measurements on one binary.
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

// The weights whose launches take the TMA engine: entries of one row (min_rows 1), so by shape alone.
SkinnyRegsChoice skinny_tma_plans();
// DUET_SKINNY_TMA's text: "0" (no weight), "1" (every weight), or comma-separated shapes "NxK"; an entry it cannot read
// names nothing. nullptr: the plans.
SkinnyRegsChoice parse_skinny_tma_choice(const char* text);
// The process's choice: DUET_SKINNY_TMA when set, else the plans (read once).
bool skinny_tma_for(int32_t n, int32_t k);

}  // namespace duet::backend::cuda
