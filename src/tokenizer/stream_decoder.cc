// Streaming decode: bytes are emitted as soon as they form whole characters. Invalid bytes are replaced
// exactly as the one-shot decode replaces them, because a maximal invalid subpart is decided by the bytes up
// to it; only a valid-but-unfinished tail is held back. So the concatenated pushes plus finish() equal
// decode(all ids).
#include "base/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace duet::tokenizer {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string StreamDecoder::push(int32_t id) {
  const std::string* bytes = tokenizer_.token_bytes(id);
  if (bytes == nullptr) {
    const int32_t one[] = {id};
    std::string text = tokenizer_.decode(one, skip_special_tokens_);  // throws for an unknown id
    return text;
  }
  if (skip_special_tokens_ && tokenizer_.is_special(id)) return {};
  pending_ += *bytes;
  const size_t keep = utf8_incomplete_tail(pending_);
  std::string out;
  utf8_lossy_append(out, std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  utf8_lossy_append(out, pending_);
  pending_.clear();
  return out;
}

}  // namespace duet::tokenizer
