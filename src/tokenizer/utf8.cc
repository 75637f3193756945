#include "tokenizer/utf8.h"

namespace duet::tokenizer {
namespace {

// Valid second bytes depend on the lead byte (Unicode Table 3-7): this is what excludes overlong forms,
// surrogates and code points above U+10FFFF, and what decides where a maximal subpart ends.
bool second_ok(uint8_t lead, uint8_t b) {
  if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
  if (lead == 0xED) return b >= 0x80 && b <= 0x9F;
  if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;
  if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;
  return b >= 0x80 && b <= 0xBF;
}

size_t expected_len(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;  // continuation bytes, C0, C1, F5..FF never start a character
}

// Length of the longest prefix of a character at s[i] that is valid so far (1..need), and `need`.
size_t valid_prefix(std::string_view s, size_t i, size_t& need) {
  const auto lead = static_cast<uint8_t>(s[i]);
  need = expected_len(lead);
  if (need <= 1) return need;
  size_t n = 1;
  while (n < need && i + n < s.size()) {
    const auto b = static_cast<uint8_t>(s[i + n]);
    const bool ok = n == 1 ? second_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
    ++n;
  }
  return n;
}

}  // namespace

size_t utf8_char_len(std::string_view s, size_t i) {
  size_t need = 0;
  const size_t n = valid_prefix(s, i, need);
  return n == need ? n : 0;
}

size_t utf8_invalid_at(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = utf8_char_len(s, i);
    if (n == 0) return i;
    i += n;
  }
  return s.size();
}

char32_t utf8_next(std::string_view s, size_t& i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  const size_t n = expected_len(b0);
  char32_t cp = b0 & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

void utf8_lossy_append(std::string& out, std::string_view bytes) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  size_t i = 0;
  size_t run = 0;  // start of the current run of valid bytes, copied in one go
  while (i < bytes.size()) {
    if (static_cast<uint8_t>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t need = 0;
    const size_t n = valid_prefix(bytes, i, need);
    if (need != 0 && n == need) {
      i += n;
      continue;
    }
    out.append(bytes.substr(run, i - run));
    out.append(kReplacement);
    i += n == 0 ? 1 : n;  // the maximal subpart: the valid prefix, or the single bad byte
    run = i;
  }
  out.append(bytes.substr(run));
}

size_t utf8_incomplete_tail(std::string_view s) {
  // A character is at most 4 bytes, so only the last 3 can be an unfinished one.
  const size_t from = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t i = from; i < s.size(); ++i) {
    const auto b = static_cast<uint8_t>(s[i]);
    if (b < 0x80 || (b >= 0x80 && b <= 0xBF)) continue;  // not a lead byte
    size_t need = 0;
    const size_t n = valid_prefix(s, i, need);
    if (need > 1 && n < need && i + n == s.size()) return s.size() - i;
  }
  return 0;
}

}  // namespace duet::tokenizer
