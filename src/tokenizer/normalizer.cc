#include "tokenizer/normalizer.h"

#include <cstdlib>
#include <memory>
#include <vector>

#include <utf8proc.h>

#include "base/error.h"
#include "tokenizer/utf8.h"

namespace duet::tokenizer {
namespace {

bool compute_inert(char32_t cp) {
  if (cp < 0x300) return true;  // Latin-1 and friends: nothing below U+0300 composes with what precedes it
  // Hangul vowels and trailing consonants join the syllable before them algorithmically.
  if ((cp >= 0x1161 && cp <= 0x1175) || (cp >= 0x11A8 && cp <= 0x11C2)) return false;
  const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
  if (p->combining_class != 0) return false;
  // decomp_type 0 with a sequence is a canonical decomposition (compatibility ones carry a type).
  if (p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0) return false;
  // utf8proc marks code points that can be the second of a composition pair with comb_index >= 0x8000.
  if (p->comb_index != UINT16_MAX && p->comb_index >= 0x8000) return false;
  return true;
}

// One bit per BMP code point, built once; astral code points are looked up directly (rare in text).
const std::vector<bool>& inert_bmp() {
  static const std::vector<bool> table = [] {
    std::vector<bool> t(0x10000);
    for (char32_t cp = 0; cp < 0x10000; ++cp) t[cp] = compute_inert(cp);
    return t;
  }();
  return table;
}

}  // namespace

bool nfc_inert(char32_t cp) { return cp < 0x10000 ? inert_bmp()[cp] : compute_inert(cp); }

std::string_view Normalizer::apply(std::string_view in, std::string& scratch) const {
  if (kind_ == Kind::kNone) return in;
  const auto& bmp = inert_bmp();
  size_t i = 0;
  bool inert = true;
  while (i < in.size()) {
    const auto b = static_cast<uint8_t>(in[i]);
    if (b < 0xCC) {  // lead bytes below 0xCC encode code points below U+0300
      i += b < 0x80 ? 1 : 2;
      continue;
    }
    const char32_t cp = utf8_next(in, i);
    if (!(cp < 0x10000 ? bmp[cp] : compute_inert(cp))) {
      inert = false;
      break;
    }
  }
  if (inert) return in;
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(in.data()),
                              static_cast<utf8proc_ssize_t>(in.size()), &out,
                              static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) fail("tokenizer: NFC normalisation failed: {}", utf8proc_errmsg(n));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  scratch.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  return scratch;
}

}  // namespace duet::tokenizer
