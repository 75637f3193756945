#pragma once
// Byte-level BPE read from a Hugging Face tokenizer.json (+ tokenizer_config.json), exact against HF tokenizers.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace duet::tokenizer {

class Tokenizer {
 public:
  // Reads `dir`/tokenizer.json and, when present, `dir`/tokenizer_config.json. Throws duet::Error naming the
  // file and the unsupported or malformed part.
  static std::unique_ptr<Tokenizer> load_dir(const std::string& dir);
  // The same from the files' text (`tokenizer_config_json` may be empty); `origin` names them in errors.
  static std::unique_ptr<Tokenizer> load_json(std::string_view tokenizer_json,
                                              std::string_view tokenizer_config_json = {},
                                              const std::string& origin = "tokenizer.json");
  virtual ~Tokenizer() = default;

  // Added/special tokens are matched inside the text first; the rest goes through NFC, split, BPE.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Throws duet::Error for an id the tokenizer does not have.
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const = 0;

  virtual int32_t vocab_size() const = 0;  // 1 + the largest id, added tokens included
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual bool is_special(int32_t id) const = 0;
  // An added token (special or not, "<think>" as much as "<|im_end|>"): matched whole in text, never by BPE.
  virtual bool is_added(int32_t id) const { return is_special(id); }
  virtual std::optional<int32_t> eos_id() const = 0;  // from tokenizer_config.json's eos_token
  virtual std::optional<int32_t> pad_id() const = 0;
  virtual const std::string& chat_template() const = 0;  // tokenizer_config.json's, or empty
  // The raw bytes `id` stands for (before any UTF-8 repair), or nullptr for an id the tokenizer does not
  // have. StreamDecoder uses it; an implementation without it (a test double) streams decode({id}) instead.
  virtual const std::string* token_bytes(int32_t id) const { return nullptr; }
};

// Streaming decode: returns the text that is complete after each id; never splits a UTF-8 character and
// returns what is left (replacement characters for bytes that never completed) from finish().
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  std::string push(int32_t id);
  std::string finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;  // bytes of an incomplete UTF-8 character
};

}  // namespace duet::tokenizer
