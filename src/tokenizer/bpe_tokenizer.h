#pragma once
// The Tokenizer for byte-level BPE: added tokens, NFC, regex split, BPE on bytes; decode through the
// ByteLevel decoder with tokenizers' lossy UTF-8. Built by the tokenizer.json loader.
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace duet::tokenizer {

// Everything the loader reads out of tokenizer.json and tokenizer_config.json.
struct TokenizerParts {
  std::vector<std::string> tokens;  // id -> the token's string (vocabulary spelling or added content)
  std::vector<bool> exists;         // ids that are neither in the vocabulary nor added are holes
  std::vector<std::string> bytes;   // id -> what the ByteLevel decoder turns it into
  std::vector<bool> special;
  std::unordered_map<std::string, int32_t> vocab;  // the model's vocabulary: token string -> id
  std::vector<AddedToken> added;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  std::optional<int32_t> eos_id;
  std::optional<int32_t> pad_id;
  std::string chat_template;
};

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(TokenizerParts parts);

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const override;
  int32_t vocab_size() const override { return int32_t(parts_.tokens.size()); }
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  bool is_special(int32_t id) const override;
  bool is_added(int32_t id) const override;
  std::optional<int32_t> eos_id() const override { return parts_.eos_id; }
  std::optional<int32_t> pad_id() const override { return parts_.pad_id; }
  const std::string& chat_template() const override { return parts_.chat_template; }
  const std::string* token_bytes(int32_t id) const override;

  // Set by the loader after construction (they are looked up through token_to_id).
  void set_config_ids(std::optional<int32_t> eos, std::optional<int32_t> pad) {
    parts_.eos_id = eos;
    parts_.pad_id = pad;
  }
  void set_chat_template(std::string text) { parts_.chat_template = std::move(text); }

 private:
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;

  TokenizerParts parts_;
  std::unordered_map<std::string, int32_t> added_ids_;
  AddedTokenMatcher raw_matcher_;         // tokens with normalized=false, found in the raw text
  AddedTokenMatcher normalized_matcher_;  // tokens with normalized=true, found after NFC
};

}  // namespace duet::tokenizer
