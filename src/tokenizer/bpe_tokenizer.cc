#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>

#include "base/error.h"
#include "tokenizer/utf8.h"

namespace duet::tokenizer {

BpeTokenizer::BpeTokenizer(TokenizerParts parts) : parts_(std::move(parts)) {
  for (const AddedToken& t : parts_.added) {
    added_ids_[t.content] = t.id;
    if (t.normalized) {
      // tokenizers normalises a normalized token's content before looking for it in normalised text.
      std::string scratch;
      normalized_matcher_.add(t, std::string(parts_.normalizer.apply(t.content, scratch)));
    } else {
      raw_matcher_.add(t, t.content);
    }
  }
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  if (size_t bad = utf8_invalid_at(text); bad != text.size()) {
    fail("tokenizer: input text is not valid UTF-8 (byte {} of {})", bad, text.size());
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  raw_matcher_.split(
      text, [&](std::string_view piece) { encode_plain(piece, out); }, [&](int32_t id) { out.push_back(id); });
  return out;
}

void BpeTokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  std::string scratch;
  const std::string_view normalized = parts_.normalizer.apply(text, scratch);
  thread_local std::vector<std::string_view> a, b;  // reused piece lists: no allocation per call
  normalized_matcher_.split(
      normalized,
      [&](std::string_view piece) {
        parts_.pre_tokenizer.run(piece, a, b, [&](std::string_view word) { parts_.model->encode_word(word, out); });
      },
      [&](int32_t id) { out.push_back(id); });
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int32_t id : ids) {
    const std::string* b = token_bytes(id);
    if (b == nullptr) fail("tokenizer: cannot decode id {}: not a token of this tokenizer ({} ids)", id, vocab_size());
    if (skip_special_tokens && parts_.special[size_t(id)]) continue;
    bytes += *b;
  }
  std::string text;
  text.reserve(bytes.size());
  utf8_lossy_append(text, bytes);
  return text;
}

const std::string* BpeTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || size_t(id) >= parts_.tokens.size() || !parts_.exists[size_t(id)]) return nullptr;
  return &parts_.bytes[size_t(id)];
}

std::optional<int32_t> BpeTokenizer::token_to_id(std::string_view token) const {
  const std::string key(token);
  if (auto it = added_ids_.find(key); it != added_ids_.end()) return it->second;
  if (auto it = parts_.vocab.find(key); it != parts_.vocab.end()) return it->second;
  return std::nullopt;
}

bool BpeTokenizer::is_special(int32_t id) const {
  return id >= 0 && size_t(id) < parts_.special.size() && parts_.special[size_t(id)];
}

bool BpeTokenizer::is_added(int32_t id) const {
  return std::any_of(parts_.added.begin(), parts_.added.end(), [id](const AddedToken& t) { return t.id == id; });
}

}  // namespace duet::tokenizer
