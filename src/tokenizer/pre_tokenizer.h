#pragma once
// The pre-tokenizer of tokenizer.json: regex Splits (Isolated or Removed) applied in order, each to every
// piece the previous one left, then ByteLevel (which may split with GPT-2's regex first). The regex comes from
// the file and runs on PCRE2 with UTF, UCP and JIT. HF tokenizers runs it on Oniguruma, whose `\s` is
// Unicode's White_Space set; PCRE2's differs (it adds U+180E), so `\s`/`\S` are rewritten to that set.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace duet::tokenizer {

class RegexSplitter {
 public:
  enum class Behavior { kIsolated, kRemoved };
  // Throws duet::Error naming the pattern when PCRE2 cannot compile it.
  RegexSplitter(const std::string& pattern, Behavior behavior);
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;

  // Appends the pieces of `text` (valid UTF-8) to `out`: matches and the gaps between them for Isolated,
  // only the gaps for Removed. Empty pieces are dropped, as tokenizers drops them.
  void split(std::string_view text, std::vector<std::string_view>& out) const {
    split_each(text, [&](std::string_view piece) { out.push_back(piece); });
  }
  // The same, handing each piece to `piece(std::string_view)` as it is found (no list of pieces).
  template <typename F>
  void split_each(std::string_view text, F&& piece) const {
    using Fn = std::remove_reference_t<F>;
    split_raw(
        text, [](void* f, std::string_view p) { (*static_cast<Fn*>(f))(p); }, &piece);
  }

  const std::string& pattern() const { return pattern_; }

 private:
  void split_raw(std::string_view text, void (*emit)(void*, std::string_view), void* context) const;

  std::string pattern_;
  Behavior behavior_;
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

// Rewrites `\s` and `\S` to Oniguruma's meaning (White_Space). Exposed for its test.
std::string onig_compatible_pattern(const std::string& pattern);

// GPT-2's pattern, which ByteLevel splits with when its use_regex is true.
extern const char* const kGpt2Pattern;

class PreTokenizer {
 public:
  void add(RegexSplitter splitter) { steps_.push_back(std::move(splitter)); }
  bool empty() const { return steps_.empty(); }

  // Calls `word` for every piece of `text` after all steps.
  template <typename F>
  void run(std::string_view text, std::vector<std::string_view>& a, std::vector<std::string_view>& b, F&& word) const {
    if (steps_.empty()) {
      if (!text.empty()) word(text);
      return;
    }
    if (steps_.size() == 1) {  // the usual case: words go straight to BPE, no list of millions of pieces
      steps_[0].split_each(text, word);
      return;
    }
    a.clear();
    steps_[0].split(text, a);
    for (size_t k = 1; k < steps_.size(); ++k) {
      b.clear();
      for (std::string_view piece : a) steps_[k].split(piece, b);
      a.swap(b);
    }
    for (std::string_view piece : a) word(piece);
  }

 private:
  std::vector<RegexSplitter> steps_;
};

}  // namespace duet::tokenizer
