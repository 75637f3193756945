#include "grammar/char_set.h"

#include <algorithm>
#include <array>

namespace duet::grammar {

CharSet CharSet::range(uint32_t lo, uint32_t hi) {
  CharSet s;
  s.add(lo, hi);
  return s;
}

void CharSet::add(uint32_t lo, uint32_t hi) {
  hi = std::min(hi, kMax);
  if (lo > hi) return;
  // Surrogates are not characters: a lone one is not valid UTF-8, and \uD800-style escapes would count as two.
  if (lo < 0xD800 && hi >= 0xD800) {
    ranges_.push_back({lo, 0xD7FF});
    if (hi > 0xDFFF) ranges_.push_back({0xE000, hi});
  } else if (lo >= 0xD800 && lo <= 0xDFFF) {
    if (hi > 0xDFFF) ranges_.push_back({0xE000, hi});
  } else {
    ranges_.push_back({lo, hi});
  }
  normalize();
}

void CharSet::add(const CharSet& other) {
  ranges_.insert(ranges_.end(), other.ranges_.begin(), other.ranges_.end());
  normalize();
}

void CharSet::normalize() {
  std::sort(ranges_.begin(), ranges_.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& r : ranges_) {
    if (!merged.empty() && r.first <= merged.back().second + 1)
      merged.back().second = std::max(merged.back().second, r.second);
    else
      merged.push_back(r);
  }
  ranges_ = std::move(merged);
}

CharSet CharSet::complement() const {
  CharSet out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : ranges_) {
    if (lo > next) out.add(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMax) out.add(next, kMax);
  return out;
}

CharSet CharSet::minus(const CharSet& other) const {
  CharSet out;
  const CharSet keep = other.complement();
  for (const auto& [lo, hi] : ranges_)
    for (const auto& [klo, khi] : keep.ranges_) out.add(std::max(lo, klo), std::min(hi, khi));
  return out;
}

bool CharSet::contains(uint32_t c) const {
  return std::any_of(ranges_.begin(), ranges_.end(), [c](const auto& r) { return r.first <= c && c <= r.second; });
}

namespace {

int utf8_length(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

std::array<uint8_t, 4> encode(uint32_t c, int n) {
  std::array<uint8_t, 4> b{};
  if (n == 1) {
    b[0] = static_cast<uint8_t>(c);
  } else {
    static constexpr uint8_t lead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
    for (int i = n - 1; i > 0; --i) {
      b[static_cast<size_t>(i)] = static_cast<uint8_t>(0x80 | (c & 0x3F));
      c >>= 6;
    }
    b[0] = static_cast<uint8_t>(lead[n] | c);
  }
  return b;
}

// [lo, hi] of one encoded length, split until every byte position is an independent range (the split used by
// regex engines that compile to UTF-8 automata): then the sequence of per-position ranges is exact.
void split(uint32_t lo, uint32_t hi, std::vector<Expr>& out) {
  const int n = utf8_length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split(lo, lo | m, out);
        split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split(lo, (hi & ~m) - 1, out);
        split(hi & ~m, hi, out);
        return;
      }
    }
  }
  const auto a = encode(lo, n), b = encode(hi, n);
  std::vector<Expr> parts;
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) parts.push_back(byte_range(a[i], b[i]));
  out.push_back(parts.size() == 1 ? parts[0] : seq(std::move(parts)));
}

}  // namespace

Expr utf8_range(uint32_t lo, uint32_t hi) {
  std::vector<Expr> out;
  const CharSet set = CharSet::range(lo, hi);
  for (auto [a, b] : set.ranges()) {
    for (uint32_t limit : {0x7Fu, 0x7FFu, 0xFFFFu, 0x10FFFFu}) {  // one encoded length at a time
      if (a > limit) continue;
      const uint32_t end = std::min(b, limit);
      split(a, end, out);
      if (end == b) break;
      a = end + 1;
    }
  }
  return out.size() == 1 ? out[0] : alt(std::move(out));
}

Expr utf8_char(const CharSet& set) {
  std::vector<Expr> parts;
  for (const auto& [lo, hi] : set.ranges()) parts.push_back(utf8_range(lo, hi));
  return parts.size() == 1 ? parts[0] : alt(std::move(parts));
}

Expr json_string_char(const CharSet& set) {
  std::vector<Expr> parts;
  // Written raw: everything but '"', '\' and the controls below 0x20.
  CharSet raw = CharSet::range(0x20, CharSet::kMax);
  for (const auto& [lo, hi] : set.ranges()) {
    for (const auto& [rlo, rhi] : raw.ranges()) {
      const uint32_t a = std::max(lo, rlo), b = std::min(hi, rhi);
      if (a > b) continue;
      // Split around '"' (0x22) and '\' (0x5C).
      uint32_t at = a;
      for (uint32_t hole : {0x22u, 0x5Cu}) {
        if (hole < at || hole > b) continue;
        if (hole > at) parts.push_back(utf8_range(at, hole - 1));
        at = hole + 1;
      }
      if (at <= b) parts.push_back(utf8_range(at, b));
    }
  }
  // Escapes share their prefix ('\\', then "u00", then the first hex digit), so the automaton stays deterministic.
  std::vector<Expr> after_backslash;
  for (const auto& [c, letter] : {std::pair<uint32_t, char>{'"', '"'},
                                  {'\\', '\\'},
                                  {'\b', 'b'},
                                  {'\f', 'f'},
                                  {'\n', 'n'},
                                  {'\r', 'r'},
                                  {'\t', 't'}})
    if (set.contains(c)) after_backslash.push_back(byte_of(static_cast<uint8_t>(letter)));
  std::vector<Expr> hex_pairs;
  static constexpr char hex[] = "0123456789abcdef";
  for (uint32_t high = 0; high < 2; ++high) {
    std::vector<Expr> lows;
    for (uint32_t low = 0; low < 16; ++low) {
      const uint32_t c = high * 16 + low;
      const bool short_form = c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t';
      if (set.contains(c) && !short_form) lows.push_back(byte_of(static_cast<uint8_t>(hex[low])));
    }
    if (!lows.empty()) hex_pairs.push_back(seq({byte_of(static_cast<uint8_t>(hex[high])), alt(std::move(lows))}));
  }
  if (!hex_pairs.empty()) after_backslash.push_back(seq({literal("u00"), alt(std::move(hex_pairs))}));
  if (!after_backslash.empty()) parts.push_back(seq({byte_of('\\'), alt(std::move(after_backslash))}));
  return parts.size() == 1 ? parts[0] : alt(std::move(parts));
}

}  // namespace duet::grammar
