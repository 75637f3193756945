#include "grammar/regex.h"

#include <cctype>
#include <string>

#include "base/error.h"
#include "grammar/char_set.h"

namespace duet::grammar {

namespace {

CharSet digits() { return CharSet::range('0', '9'); }
CharSet word() {
  CharSet s = CharSet::range('a', 'z');
  s.add('A', 'Z');
  s.add('0', '9');
  s.add('_', '_');
  return s;
}
CharSet space() {  // ECMA-262 WhiteSpace and LineTerminator
  CharSet s;
  for (uint32_t c :
       {0x09u, 0x0Au, 0x0Bu, 0x0Cu, 0x0Du, 0x20u, 0xA0u, 0x1680u, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u, 0xFEFFu})
    s.add(c, c);
  s.add(0x2000, 0x200A);
  return s;
}
CharSet dot() {  // everything but line terminators (no `s` flag)
  CharSet s;
  for (uint32_t c : {0x0Au, 0x0Du, 0x2028u, 0x2029u}) s.add(c, c);
  return s.complement();
}

class RegexParser {
 public:
  RegexParser(const std::string& p, const CharWriter& write) : p_(p), write_(write) {}

  Expr parse() {
    std::vector<Expr> branches;
    do {
      bool anchored_start = eat('^');
      std::vector<Expr> items = sequence(/*top=*/true);
      bool anchored_end = false;
      if (peek('$')) {
        ++at_;
        anchored_end = true;
      }
      if (!at_end() && !peek('|')) refuse("'$' before the end");
      Expr any = star(write_(CharSet::any()));
      if (!anchored_start) items.insert(items.begin(), any);
      if (!anchored_end) items.push_back(any);
      branches.push_back(seq(std::move(items)));
    } while (eat('|'));
    if (!at_end()) refuse("unbalanced ')'");
    return branches.size() == 1 ? branches[0] : alt(std::move(branches));
  }

 private:
  [[noreturn]] void refuse(const std::string& what) const {
    fail("pattern \"{}\": {} at offset {} is not supported", p_, what, at_);
  }
  bool at_end() const { return at_ >= p_.size(); }
  bool peek(char c) const { return !at_end() && p_[at_] == c; }
  bool eat(char c) {
    if (!peek(c)) return false;
    ++at_;
    return true;
  }

  // A code point of the pattern (UTF-8).
  uint32_t next_char() {
    const auto b = static_cast<uint8_t>(p_[at_++]);
    if (b < 0x80) return b;
    const int n = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : 1;
    uint32_t c = b & (0x3F >> n);
    for (int i = 0; i < n && !at_end(); ++i) c = (c << 6) | (static_cast<uint8_t>(p_[at_++]) & 0x3F);
    return c;
  }

  uint32_t hex(size_t digits) {
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i) {
      if (at_end() || !std::isxdigit(static_cast<unsigned char>(p_[at_]))) refuse("a malformed hex escape");
      v = v * 16 + static_cast<uint32_t>(std::stoi(std::string(1, p_[at_++]), nullptr, 16));
    }
    return v;
  }

  // After a backslash: a class escape or one character.
  CharSet escape(bool in_class) {
    if (at_end()) refuse("a trailing backslash");
    const char c = p_[at_++];
    switch (c) {
      case 'd':
        return digits();
      case 'D':
        return digits().complement();
      case 'w':
        return word();
      case 'W':
        return word().complement();
      case 's':
        return space();
      case 'S':
        return space().complement();
      case 'n':
        return CharSet::of('\n');
      case 't':
        return CharSet::of('\t');
      case 'r':
        return CharSet::of('\r');
      case 'f':
        return CharSet::of('\f');
      case 'v':
        return CharSet::of('\v');
      case '0':
        return CharSet::of(0);
      case 'x':
        return CharSet::of(hex(2));
      case 'u':
        if (eat('{')) {
          uint32_t v = 0;
          while (!eat('}')) v = v * 16 + hex(1);
          return CharSet::of(v);
        }
        return CharSet::of(hex(4));
      case 'b':
        if (in_class) return CharSet::of('\b');
        --at_;
        refuse("the word boundary \\b");
      case 'B':
        --at_;
        refuse("\\B");
      case 'k':
        --at_;
        refuse("a named backreference");
      case 'p':
      case 'P':
        --at_;
        refuse("a unicode property escape");
      case 'c':
        --at_;
        refuse("a control escape \\c");
      default:
        if (c >= '1' && c <= '9') {
          --at_;
          refuse("a backreference");
        }
        if (std::isalnum(static_cast<unsigned char>(c))) {
          --at_;
          refuse(std::string("the escape \\") + c);
        }
        return CharSet::of(static_cast<uint8_t>(c));  // an escaped syntax character
    }
  }

  CharSet char_class() {  // after '['
    const bool negated = eat('^');
    CharSet set;
    while (!eat(']')) {
      if (at_end()) refuse("an unterminated class");
      CharSet lo_set;
      bool single = true;
      uint32_t lo = 0;
      if (eat('\\')) {
        lo_set = escape(true);
        single = lo_set.ranges().size() == 1 && lo_set.ranges()[0].first == lo_set.ranges()[0].second;
        if (single) lo = lo_set.ranges()[0].first;
      } else {
        lo = next_char();
        lo_set = CharSet::of(lo);
      }
      if (single && peek('-') && at_ + 1 < p_.size() && p_[at_ + 1] != ']') {
        ++at_;
        uint32_t hi;
        if (eat('\\')) {
          const CharSet h = escape(true);
          if (h.ranges().size() != 1 || h.ranges()[0].first != h.ranges()[0].second) refuse("a class range to a class");
          hi = h.ranges()[0].first;
        } else {
          hi = next_char();
        }
        if (hi < lo) refuse("a reversed class range");
        set.add(CharSet::range(lo, hi));
      } else {
        set.add(lo_set);
      }
    }
    return negated ? set.complement() : set;
  }

  std::vector<Expr> sequence(bool top) {
    std::vector<Expr> items;
    while (!at_end() && !peek('|') && !peek(')')) {
      if (top && peek('$') && (at_ + 1 == p_.size() || p_[at_ + 1] == '|')) break;
      Expr atom = this->atom();
      items.push_back(quantified(atom));
    }
    return items;
  }

  Expr atom() {
    const char c = p_[at_];
    if (c == '^' || c == '$') refuse(std::string("the anchor '") + c + "' inside the pattern");
    if (c == '*' || c == '+' || c == '?' || c == '{') refuse("a quantifier with nothing before it");
    ++at_;
    if (c == '.') return write_(dot());
    if (c == '[') return write_(char_class());
    if (c == '\\') return write_(escape(false));
    if (c == '(') {
      if (eat('?')) {
        if (!eat(':')) refuse("lookaround or a named group");
      }
      std::vector<Expr> branches;
      do branches.push_back(seq(sequence(false)));
      while (eat('|'));
      if (!eat(')')) refuse("an unterminated group");
      return branches.size() == 1 ? branches[0] : alt(std::move(branches));
    }
    --at_;
    return write_(CharSet::of(next_char()));
  }

  int32_t number() {
    int32_t v = 0;
    bool any = false;
    while (!at_end() && std::isdigit(static_cast<unsigned char>(p_[at_]))) {
      v = v * 10 + (p_[at_++] - '0');
      if (v > 1000) refuse("a repetition count above 1000");
      any = true;
    }
    return any ? v : -1;
  }

  Expr quantified(Expr atom) {
    int32_t min = 1, max = 1;
    if (eat('*')) {
      min = 0, max = -1;
    } else if (eat('+')) {
      min = 1, max = -1;
    } else if (eat('?')) {
      min = 0, max = 1;
    } else if (peek('{')) {
      const size_t open = at_++;
      min = number();
      max = min;
      if (eat(',')) max = number();  // -1: unbounded
      if (min < 0 || !eat('}')) {    // not a quantifier: ECMA-262 (without the u flag) reads '{' as a literal
        at_ = open;
        refuse("a '{' that is not a quantifier");
      }
      if (max >= 0 && max < min) refuse("a repetition {n,m} with m < n");
    } else {
      return atom;
    }
    eat('?');  // lazy: the same language
    return repeat(std::move(atom), min, max);
  }

  const std::string& p_;
  const CharWriter& write_;
  size_t at_ = 0;
};

}  // namespace

Expr regex_string_content(const std::string& pattern, const CharWriter& write) {
  return RegexParser(pattern, write).parse();
}

}  // namespace duet::grammar
