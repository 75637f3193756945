#pragma once
// The normaliser step of tokenizer.json: nothing, or Unicode NFC (utf8proc). Text that is NFC already
// (all ASCII, most CJK, ...) is recognised by a per-character table and never copied through utf8proc.
#include <string>
#include <string_view>

namespace duet::tokenizer {

class Normalizer {
 public:
  enum class Kind { kNone, kNfc };
  explicit Normalizer(Kind kind = Kind::kNone) : kind_(kind) {}
  Kind kind() const { return kind_; }

  // Returns `in` itself when it needs no change, else a view of `scratch`, which it fills.
  std::string_view apply(std::string_view in, std::string& scratch) const;

 private:
  Kind kind_;
};

// True when no NFC pass can change a string made of this code point and others like it: canonical class 0,
// no canonical decomposition, never the second half of a composition. Exposed for its test.
bool nfc_inert(char32_t cp);

}  // namespace duet::tokenizer
