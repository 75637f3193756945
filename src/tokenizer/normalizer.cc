#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <vector>

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

namespace {

void nfc_append(std::string_view in, std::string& out) {
  utf8proc_uint8_t* mapped = nullptr;
  const auto n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(in.data()), static_cast<utf8proc_ssize_t>(in.size()),
                   &mapped, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) fail("tokenizer: NFC normalisation failed: {}", utf8proc_errmsg(n));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(mapped, &std::free);
  out.append(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
}

}  // namespace

std::string_view Normalizer::apply(std::string_view in, std::string& scratch) const {
  if (kind_ == Kind::kNone) return in;
  const auto& bmp = inert_bmp();
  auto inert_at = [&](size_t i, size_t& next) {
    const auto b = static_cast<uint8_t>(in[i]);
    if (b < 0xCC) {  // lead bytes below 0xCC encode code points below U+0300
      next = i + (b < 0x80 ? 1 : 2);
      return true;
    }
    next = i;
    const char32_t cp = utf8_next(in, next);
    return cp < 0x10000 ? bool(bmp[cp]) : compute_inert(cp);
  };
  // NFC never moves anything across an inert character nor composes it with what precedes it, so only the
  // spans from the inert character before a non-inert run up to the next inert character go to utf8proc.
  size_t i = 0, last_inert = 0, copied = 0;
  bool changed = false;
  while (i < in.size()) {
    size_t next;
    if (inert_at(i, next)) {
      last_inert = i;
      i = next;
      continue;
    }
    size_t end = next;
    while (end < in.size()) {
      size_t after;
      if (inert_at(end, after)) break;
      end = after;
    }
    if (!changed) {
      scratch.clear();
      changed = true;
    }
    scratch.append(in.substr(copied, last_inert - copied));
    nfc_append(in.substr(last_inert, end - last_inert), scratch);
    copied = i = last_inert = end;
  }
  if (!changed) return in;
  scratch.append(in.substr(copied));
  return scratch;
}

}  // namespace duet::tokenizer
