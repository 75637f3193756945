#include "tokenizer/added_tokens.h"

#include <utf8proc.h>

#include <algorithm>

#include "tokenizer/utf8.h"

namespace duet::tokenizer {
namespace {

// Rust regex's \w: Alphabetic, marks, decimal digits, connector punctuation, joiners.
bool is_word_char(char32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  if (cp == 0x200C || cp == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// The code point that ends `s` (valid UTF-8, not empty).
char32_t last_char(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
  return utf8_next(s, i);
}

}  // namespace

bool is_white_space(char32_t cp) {
  return (cp >= 0x9 && cp <= 0xD) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

void AddedTokenMatcher::add(const AddedToken& token, std::string content) {
  if (content.empty()) return;  // an empty token can never be matched
  patterns_.push_back({token, std::move(content)});
  const auto k = static_cast<uint16_t>(patterns_.size() - 1);
  auto& list = by_first_byte_[static_cast<uint8_t>(patterns_[k].content[0])];
  list.push_back(k);
  std::stable_sort(list.begin(), list.end(),
                   [&](uint16_t a, uint16_t b) { return patterns_[a].content.size() > patterns_[b].content.size(); });
}

bool AddedTokenMatcher::ends_with_word(std::string_view before) {
  return !before.empty() && is_word_char(last_char(before));
}

bool AddedTokenMatcher::starts_with_word(std::string_view after) {
  size_t i = 0;
  return !after.empty() && is_word_char(utf8_next(after, i));
}

size_t AddedTokenMatcher::trailing_space_start(std::string_view before) {
  size_t end = before.size();
  while (end > 0) {
    size_t i = end - 1;
    while (i > 0 && (static_cast<uint8_t>(before[i]) & 0xC0) == 0x80) --i;
    size_t j = i;
    if (!is_white_space(utf8_next(before, j))) break;
    end = i;
  }
  return end;
}

size_t AddedTokenMatcher::leading_space_len(std::string_view after) {
  size_t i = 0;
  while (i < after.size()) {
    size_t j = i;
    if (!is_white_space(utf8_next(after, j))) break;
    i = j;
  }
  return i;
}

}  // namespace duet::tokenizer
