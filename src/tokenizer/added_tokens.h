#pragma once
// Added tokens (special or not) are found in the text before anything else, as tokenizers' AddedVocabulary
// does: leftmost-longest matches scanned left to right without overlap; single_word discards a match glued
// to word characters; lstrip/rstrip take the whitespace beside the match into the token.
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace duet::tokenizer {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool normalized = false;  // matched in normalised text (after NFC) instead of the raw text
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `contents[k]` is what to look for (the token's content, normalised for normalized tokens).
  void add(const AddedToken& token, std::string content);
  bool empty() const { return patterns_.empty(); }

  // Calls on_text(piece) for text between tokens (never empty) and on_token(id) for each token, in order.
  template <typename OnText, typename OnToken>
  void split(std::string_view text, OnText&& on_text, OnToken&& on_token) const {
    if (patterns_.empty()) {
      if (!text.empty()) on_text(text);
      return;
    }
    size_t emitted = 0;  // end of what has been handed out
    size_t i = 0;
    while (i < text.size()) {
      const auto& candidates = by_first_byte_[static_cast<uint8_t>(text[i])];
      const Pattern* hit = nullptr;
      for (uint16_t k : candidates) {  // longest first
        if (text.compare(i, patterns_[k].content.size(), patterns_[k].content) == 0) {
          hit = &patterns_[k];
          break;
        }
      }
      if (hit == nullptr) {
        ++i;
        continue;
      }
      size_t start = i, stop = i + hit->content.size();
      i = stop;  // the scan resumes after the match even when the match is discarded
      if (hit->token.single_word && ((start > 0 && ends_with_word(text.substr(0, start))) ||
                                     (stop < text.size() && starts_with_word(text.substr(stop))))) {
        continue;
      }
      if (hit->token.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), emitted);
      if (hit->token.rstrip) stop += leading_space_len(text.substr(stop));
      if (start > emitted) on_text(text.substr(emitted, start - emitted));
      on_token(hit->token.id);
      emitted = stop;
      i = std::max(i, stop);
    }
    if (emitted < text.size()) on_text(text.substr(emitted));
  }

 private:
  struct Pattern {
    AddedToken token;
    std::string content;
  };
  // Rust regex's \w and \s, which tokenizers uses for these checks.
  static bool ends_with_word(std::string_view before);
  static bool starts_with_word(std::string_view after);
  static size_t trailing_space_start(std::string_view before);
  static size_t leading_space_len(std::string_view after);

  std::vector<Pattern> patterns_;
  std::array<std::vector<uint16_t>, 256> by_first_byte_;
};

// Unicode White_Space (Rust's char::is_whitespace, Rust regex's \s).
bool is_white_space(char32_t cp);

}  // namespace duet::tokenizer
