#pragma once
// A tokenizer for engine tests: id i decodes to a fixed piece of text (letters, words, and a two-byte
// character split over two ids), enough to exercise streaming text and stop strings without tokenizer.json.
#include <string>

#include "tokenizer/tokenizer.h"

namespace duet::engine::testing {

class FakeTokenizer : public tokenizer::Tokenizer {
 public:
  explicit FakeTokenizer(int32_t vocab_size) : vocab_size_(vocab_size) {
    for (int32_t id = 0; id < vocab_size; ++id) pieces_.push_back(piece(id));
  }

  // 0-25: "a".."z"; 26-51: " A".." Z"; 90: first byte of "é"; 91: its second byte; others: "<i>".
  static std::string piece(int32_t id) {
    if (id < 26) return std::string(1, static_cast<char>('a' + id));
    if (id < 52) return std::string(" ") + static_cast<char>('A' + id - 26);
    if (id == 90) return "\xC3";
    if (id == 91) return "\xA9";
    return "<" + std::to_string(id) + ">";
  }

  std::vector<int32_t> encode(std::string_view) const override { return {}; }
  std::string decode(std::span<const int32_t> ids, bool) const override {
    std::string text;
    for (int32_t id : ids) text += piece(id);
    return text;
  }
  int32_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> token_to_id(std::string_view) const override { return std::nullopt; }
  bool is_special(int32_t) const override { return false; }
  std::optional<int32_t> eos_id() const override { return std::nullopt; }
  std::optional<int32_t> pad_id() const override { return std::nullopt; }
  const std::string& chat_template() const override { return template_; }
  const std::string* token_bytes(int32_t id) const override {
    return id >= 0 && id < vocab_size_ ? &pieces_[static_cast<size_t>(id)] : nullptr;
  }

 private:
  int32_t vocab_size_;
  std::vector<std::string> pieces_;
  std::string template_;
};

}  // namespace duet::engine::testing
