#pragma once
// A tokenizer for the request-parser fuzz targets: one id per byte (the byte's value), no special tokens. The parsers
// only tokenize text and count ids; a real tokenizer.json would cost each run a load the parsers never look at.
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace duet::fuzz {

class ByteTokenizer final : public tokenizer::Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    ids.reserve(text.size());
    for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }
  std::string decode(std::span<const int32_t> ids, bool) const override {
    std::string text;
    for (const int32_t id : ids) text += static_cast<char>(id);
    return text;
  }
  int32_t vocab_size() const override { return 256; }
  std::optional<int32_t> token_to_id(std::string_view) const override { return std::nullopt; }
  bool is_special(int32_t) const override { return false; }
  std::optional<int32_t> eos_id() const override { return std::nullopt; }
  std::optional<int32_t> pad_id() const override { return std::nullopt; }
  const std::string& chat_template() const override { return template_; }

 private:
  std::string template_;
};

}  // namespace duet::fuzz
