#include "backend/cuda/skinny_regs_choice.h"

#include <charconv>
#include <cstdlib>
#include <string_view>
#include <system_error>

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

namespace {

// Calls `entry` with each comma-separated entry of `text`.
template <typename Entry>
void for_each_entry(std::string_view text, Entry entry) {
  while (!text.empty()) {
    const size_t comma = text.find(',');
    entry(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
}

// A positive decimal number that is the whole of `text`, else 0.
int positive(std::string_view text) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size() && value > 0 ? value : 0;
}

// "NxK" into c's next entry from min_rows rows; false (and nothing added) when it is not one or c is full.
bool add_shape(std::string_view shape, int min_rows, SkinnyRegsChoice& c) {
  const size_t x = shape.find('x');
  if (x == std::string_view::npos || c.count >= SkinnyRegsChoice::kMaxEntries) return false;
  const int n = positive(shape.substr(0, x)), k = positive(shape.substr(x + 1));
  if (n == 0 || k == 0) return false;
  c.entries[c.count++] = {n, k, min_rows};
  return true;
}

}  // namespace

SkinnyRegsChoice parse_skinny_regs_choice(const char* text) {
  if (text == nullptr) return skinny_regs_plans();
  SkinnyRegsChoice c;
  for_each_entry(text, [&](std::string_view entry) {
    const size_t colon = entry.find(':');
    if (colon == std::string_view::npos) return;  // "none", or unreadable
    const int rows = positive(entry.substr(colon + 1));
    if (rows == 0) return;
    if (entry.substr(0, colon) == "all") {
      c.all_from = rows;
    } else {
      add_shape(entry.substr(0, colon), rows, c);
    }
  });
  return c;
}

bool skinny_regs_for(int32_t n, int32_t k, int32_t rows) {
  static const SkinnyRegsChoice choice = parse_skinny_regs_choice(std::getenv("DUET_SKINNY_REGS"));
  return choice.takes(n, k, rows);
}

// bench_skinny_gemm --tma (an H100, docs/benchmarks.md, thirty-second round), with x by TMA and one block an SM: the
// TMA engine reads the weights of more than 8,192 rows at about the plans' rate up to 16 rows and 18-38% faster at 64
// (GB/s at 1 / 16 / 64 rows against the plans': GDN qkv | z | b | a 2,728 / 2,571 / 2,340 against 2,588 / 2,342 /
// 1,933; attention q | k | v 2,658 / 2,482 / 2,202 against 2,685 / 2,486 / 1,595; MLP gate | up 2,807 / 2,721 / 2,511
// against 2,961 / 2,780 / 1,976; the LM head 3,185 / 3,099 / 2,943 against 3,097 / 2,933 / 2,354). On the 4,096-row
// weights (out projections, MLP down) the bench had it 7-9% faster at 64 rows and 1-12% slower at one, but in the
// model (`duet run`, 33rd round) every weight on it read 2.9% faster at 64 streams and 5.2% at one than these four
// alone: the out projections and MLP down take it too.
SkinnyRegsChoice skinny_tma_plans() {
  SkinnyRegsChoice c;
  c.count = 6;
  c.entries[0] = {12352, 4096, 1};   // GDN qkv | z | b | a
  c.entries[1] = {10240, 4096, 1};   // attention q (with its gate) | k | v
  c.entries[2] = {24576, 4096, 1};   // MLP gate | up
  c.entries[3] = {248320, 4096, 1};  // LM head
  c.entries[4] = {4096, 4096, 1};    // the GDN and attention out projections
  c.entries[5] = {4096, 12288, 1};   // MLP down
  return c;
}

SkinnyRegsChoice parse_skinny_tma_choice(const char* text) {
  if (text == nullptr) return skinny_tma_plans();
  SkinnyRegsChoice c;
  if (std::string_view(text) == "1") {
    c.all_from = 1;
    return c;
  }
  for_each_entry(text, [&](std::string_view entry) { add_shape(entry, 1, c); });  // "0": no shape, so none
  return c;
}

bool skinny_tma_for(int32_t n, int32_t k) {
  static const SkinnyRegsChoice choice = parse_skinny_tma_choice(std::getenv("DUET_SKINNY_TMA"));
  return choice.takes(n, k, 1);
}

}  // namespace duet::backend::cuda
