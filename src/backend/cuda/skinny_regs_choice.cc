#include "backend/cuda/skinny_regs_choice.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>

namespace duet::backend::cuda {

bool SkinnyRegsChoice::takes(int32_t n, int32_t k, int32_t rows) const {
  if (all_from > 0 && rows >= all_from) return true;
  for (int i = 0; i < count; ++i)
    if (entries[i].n == n && entries[i].k == k && rows >= entries[i].min_rows) return true;
  return false;
}

// bench_skinny_gemm --regs (an H100, docs/benchmarks.md, twenty-eighth round) had the wgmma kernel ahead of the plan
// for GDN qkv | z | b | a from 32 rows (1,884 against 1,646 GB/s at 64; a tie at 24) and out_proj / o_proj from 16
// (1,591-1,597 against 1,423-1,438 at 64), level with it for MLP down, behind it for attention q | k | v, gate | up
// and the LM head. In the model (`duet run --streams 64`, same machine) these three shapes gave 4,837 / 4,846 tok/s
// against 4,703 / 4,692 without (+3.0%), every shape from 17 rows 4,796 / 4,786, the first two alone 4,782 / 4,774;
// 16 streams 1,905 against 1,885.
SkinnyRegsChoice skinny_regs_plans() {
  SkinnyRegsChoice c;
  c.count = 3;
  c.entries[0] = {12352, 4096, 25};  // GDN qkv | z | b | a
  c.entries[1] = {4096, 4096, 16};   // GDN out_proj, attention o_proj
  c.entries[2] = {4096, 12288, 25};  // MLP down
  return c;
}

SkinnyRegsChoice parse_skinny_regs_choice(const char* text) {
  if (text == nullptr) return skinny_regs_plans();
  SkinnyRegsChoice c;
  for (std::string_view rest(text); !rest.empty();) {
    const size_t comma = rest.find(',');
    const std::string_view entry = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t colon = entry.find(':');
    if (colon == std::string_view::npos) continue;  // "none", or unreadable
    const int rows = std::atoi(std::string(entry.substr(colon + 1)).c_str());
    if (rows <= 0) continue;
    const std::string shape(entry.substr(0, colon));
    if (shape == "all") {
      c.all_from = rows;
    } else if (const size_t x = shape.find('x'); x != std::string::npos && c.count < SkinnyRegsChoice::kMaxEntries) {
      const int n = std::atoi(shape.substr(0, x).c_str()), k = std::atoi(shape.substr(x + 1).c_str());
      if (n > 0 && k > 0) c.entries[c.count++] = {n, k, rows};
    }
  }
  return c;
}

bool skinny_regs_for(int32_t n, int32_t k, int32_t rows) {
  static const SkinnyRegsChoice choice = parse_skinny_regs_choice(std::getenv("DUET_SKINNY_REGS"));
  return choice.takes(n, k, rows);
}

}  // namespace duet::backend::cuda
