// Bad input is refused with a duet::Error that names what is wrong, never a crash: malformed or unsupported
// tokenizer.json, bad tokenizer_config.json, ids that are not tokens, text that is not UTF-8.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "tokenizer/tokenizer.h"

namespace duet::tokenizer {
namespace {

using ojson = nlohmann::ordered_json;

// A tiny byte-level BPE: bytes a, b, space ("Ġ"), merges a+b and Ġ+ab; an added special token at id 10.
ojson tiny() {
  return ojson::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 10, "content": "<|end|>", "single_word": false, "lstrip": false, "rstrip": false,
                      "normalized": false, "special": true}],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": " ?\\p{L}+|\\s+"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]},
    "post_processor": null,
    "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"a": 0, "b": 1, "Ġ": 2, "ab": 3, "Ġab": 4},
              "merges": [["a", "b"], ["Ġ", "ab"]]}
  })");
}

void expect_refused(const ojson& tokenizer, const std::string& needle, const std::string& config = {}) {
  try {
    Tokenizer::load_json(tokenizer.dump(), config);
    ADD_FAILURE() << "loaded, expected an error naming " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

TEST(TokenizerLoad, TinyTokenizerWorks) {
  const auto tok = Tokenizer::load_json(tiny().dump(), R"({"eos_token": {"content": "<|end|>"}})");
  EXPECT_EQ(tok->encode("ab ab<|end|>"), (std::vector<int32_t>{3, 4, 10}));
  EXPECT_EQ(tok->vocab_size(), 11);
  EXPECT_EQ(tok->eos_id(), 10);
  EXPECT_TRUE(tok->is_special(10));
  const int32_t ids[] = {3, 4, 10};
  EXPECT_EQ(tok->decode(ids), "ab ab<|end|>");
  EXPECT_EQ(tok->decode(ids, /*skip_special_tokens=*/true), "ab ab");
  EXPECT_EQ(tok->encode("c"), std::vector<int32_t>{});  // a byte missing from a vocabulary without unk is dropped
}

TEST(TokenizerLoad, MalformedJson) {
  EXPECT_THROW(Tokenizer::load_json("{\"model\": ", ""), Error);
  try {
    Tokenizer::load_json("{ not json", "");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos);
  }
  expect_refused(ojson::array(), "top level");
}

TEST(TokenizerLoad, RefusesUnsupportedModels) {
  auto j = tiny();
  j["model"]["type"] = "WordPiece";
  expect_refused(j, "model.type \"WordPiece\"");
  j = tiny();
  j["model"]["type"] = "Unigram";
  expect_refused(j, "model.type \"Unigram\"");
  j = tiny();
  j.erase("model");
  expect_refused(j, "\"model\"");
  for (const char* key : {"byte_fallback", "unk_token", "dropout", "continuing_subword_prefix", "end_of_word_suffix"}) {
    j = tiny();
    j["model"][key] = std::string(key) == "byte_fallback" ? ojson(true)
                      : std::string(key) == "dropout"     ? ojson(0.1)
                                                          : ojson("x");
    expect_refused(j, std::string("model.") + key);
  }
}

TEST(TokenizerLoad, RefusesBadMerges) {
  auto j = tiny();
  j["model"].erase("merges");
  expect_refused(j, "model.merges is missing");
  j = tiny();
  j["model"]["merges"] = ojson::array({"a b c"});
  expect_refused(j, "model.merges[0]");
  j = tiny();
  j["model"]["merges"] = ojson::array({ojson::array({"a", "z"})});
  expect_refused(j, "\"z\" is not in the vocabulary");
  j = tiny();
  j["model"]["merges"] = ojson::array({ojson::array({"b", "a"})});  // "ba" is not a token
  expect_refused(j, "\"ba\" is not in the vocabulary");
  j = tiny();
  j["model"]["merges"] = ojson::array({42});
  expect_refused(j, "model.merges[0]");
  j = tiny();
  j["model"]["vocab"]["x"] = 0;
  expect_refused(j, "id 0 is given to both");
  j = tiny();
  j["model"]["vocab"]["x"] = -3;
  expect_refused(j, "model.vocab[\"x\"]");
}

TEST(TokenizerLoad, RefusesUnsupportedPipeline) {
  auto j = tiny();
  j["normalizer"] = {{"type", "NFKC"}};
  expect_refused(j, "normalizer type \"NFKC\"");
  j = tiny();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  expect_refused(j, "pre_tokenizer type \"Metaspace\"");
  j = tiny();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Contiguous";
  expect_refused(j, "behavior \"Contiguous\"");
  j = tiny();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  expect_refused(j, "does not compile");
  j = tiny();
  j["pre_tokenizer"]["pretokenizers"].erase(1);
  expect_refused(j, "no ByteLevel");
  j = tiny();
  j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true;
  expect_refused(j, "add_prefix_space");
  j = tiny();
  j["decoder"] = nullptr;
  expect_refused(j, "decoder");
  j = tiny();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_refused(j, "decoder");
  j = tiny();
  j["post_processor"] = {{"type", "TemplateProcessing"}};
  expect_refused(j, "post_processor type \"TemplateProcessing\"");
  j = tiny();
  j["truncation"] = {{"max_length", 8}};
  expect_refused(j, "truncation");
  j = tiny();
  j["added_tokens"][0].erase("content");
  expect_refused(j, "added_tokens[0]");
}

TEST(TokenizerLoad, RefusesBadConfig) {
  expect_refused(tiny(), "eos_token \"<|nope|>\"", R"({"eos_token": "<|nope|>"})");
  expect_refused(tiny(), "tokenizer_config.json: not valid JSON", "{");
  expect_refused(tiny(), "chat_template", R"({"chat_template": 3})");
  expect_refused(tiny(), "added_tokens_decoder gives id 10", R"({"added_tokens_decoder": {"10": {"content": "<x>"}}})");
}

TEST(TokenizerLoad, NamedTemplatesPickDefault) {
  const auto tok = Tokenizer::load_json(
      tiny().dump(),
      R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  EXPECT_EQ(tok->chat_template(), "D");
}

TEST(TokenizerLoad, MissingDirectory) {
  try {
    Tokenizer::load_dir("/nonexistent/model");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open /nonexistent/model/tokenizer.json"), std::string::npos);
  }
}

TEST(TokenizerDecode, RefusesIdsThatAreNotTokens) {
  const auto tok = Tokenizer::load_json(tiny().dump());
  for (int32_t bad : {-1, 5, 9, 11, 1 << 30}) {  // 5..9 lie between the vocabulary and the added token
    const int32_t ids[] = {3, bad};
    try {
      tok->decode(ids);
      ADD_FAILURE() << "decoded id " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cannot decode id " + std::to_string(bad)), std::string::npos) << e.what();
    }
    StreamDecoder stream(*tok);
    EXPECT_THROW(stream.push(bad), Error);
  }
}

TEST(TokenizerEncode, RefusesInvalidUtf8) {
  const auto tok = Tokenizer::load_json(tiny().dump());
  EXPECT_THROW(tok->encode("ab\xC3"), Error);
  EXPECT_THROW(tok->encode("\xED\xA0\x80"), Error);  // a UTF-16 surrogate encoded in UTF-8
}

}  // namespace
}  // namespace duet::tokenizer
