#include "grammar/plain_text.h"

#include <map>

#include "base/error.h"
#include "grammar/char_set.h"

namespace duet::grammar {

Expr text_avoiding(const std::vector<std::string>& words) {
  if (words.empty()) return star(utf8_char(CharSet::any()));
  const char lead = words[0].empty() ? '\0' : words[0][0];
  for (const std::string& w : words)
    if (w.size() < 2 || w[0] != lead || w.find(lead, 1) != std::string::npos || static_cast<unsigned char>(lead) > 0x7F)
      fail("text_avoiding: \"{}\" must start with the one ASCII character that starts every word and holds no other",
           w);
  // Each proper prefix of a word and the characters that continue it towards some word.
  std::map<std::string, CharSet> continuing;
  for (const std::string& w : words)
    for (size_t n = 1; n < w.size(); ++n) continuing[w.substr(0, n)].add(CharSet::of(static_cast<uint8_t>(w[n])));
  for (const std::string& w : words) continuing.erase(w);  // a word that is a prefix of another is never written
  const CharSet others = CharSet::any().minus(CharSet::of(static_cast<uint8_t>(lead)));
  std::vector<Expr> attempts, broken;
  for (const auto& [prefix, next] : continuing) {
    attempts.push_back(literal(prefix));
    const CharSet breaks = others.minus(next);
    if (!breaks.empty()) broken.push_back(seq({literal(prefix), utf8_char(breaks)}));
  }
  const Expr attempt = alt(std::move(attempts));
  // A run of attempts (one starts where the previous broke off at `lead`) ends with a breaking character, or the
  // text ends inside one.
  const Expr unit = alt({utf8_char(others), seq({star(attempt), alt(std::move(broken))})});
  return seq({star(unit), star(attempt)});
}

}  // namespace duet::grammar
