// Token boundaries on the published Qwen3 vocabulary (151,643 tokens, byte-level BPE): documents tokenized by the
// tokenizer (exact against HF tokenizers, tests/tokenizer) are accepted token by token, tokens that span several
// terminals ("\":\"", "\"},{\"") are allowed where they fit, and UTF-8 split across tokens is followed byte by byte.
#include <gtest/gtest.h>

#include "corpus.h"
#include "grammar/grammar_cache.h"
#include "walk.h"

namespace duet::testing {
namespace {

class GrammarQwen3 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_ = qwen3_tokenizer().release();
    cache_ = new grammar::GrammarCache(grammar::Vocabulary::from_tokenizer(*tok_, tok_->vocab_size()));
  }
  static tokenizer::Tokenizer* tok_;
  static grammar::GrammarCache* cache_;
};
tokenizer::Tokenizer* GrammarQwen3::tok_ = nullptr;
grammar::GrammarCache* GrammarQwen3::cache_ = nullptr;

TEST_F(GrammarQwen3, TokenizedDocumentsAreAllowedTokenByToken) {
  int multi_terminal = 0;
  for (const auto& e : load_corpus()) {
    const auto g = cache_->for_schema(e.schema, {});
    for (const std::string& doc : e.valid) {
      SCOPED_TRACE(e.name + " " + doc);
      grammar::Matcher m(g);
      std::vector<uint32_t> mask(static_cast<size_t>(g->vocabulary().words()));
      for (int32_t id : tok_->encode(doc)) {
        m.fill_mask(mask);
        ASSERT_TRUE(grammar::test_bit(mask, id)) << "token " << id << " \"" << *tok_->token_bytes(id) << "\"";
        const std::string& b = *tok_->token_bytes(id);
        multi_terminal += b.size() > 1 && b.find_first_of("\":,{}[]") != std::string::npos &&
                          b.find_first_not_of("\":,{}[]") != std::string::npos;
        ASSERT_TRUE(m.accept_token(id));
      }
      EXPECT_TRUE(m.can_end());
    }
  }
  EXPECT_GT(multi_terminal, 10);  // the corpus does exercise tokens that cross from one terminal into the next
}

TEST_F(GrammarQwen3, Utf8SplitAcrossTokens) {
  const auto g = cache_->for_schema(OrderedJson::parse(R"({"type":"string"})"), {});
  const auto& v = g->vocabulary();
  // Tokens that are a UTF-8 lead byte and part of its continuation, without the rest.
  std::vector<int32_t> partial;
  for (int32_t r = 0; r < v.tokens(); ++r) {
    const std::string& b = v.bytes(r);
    if (b.size() == 2 && uint8_t(b[0]) >= 0xE0 && uint8_t(b[0]) < 0xF0 && (uint8_t(b[1]) & 0xC0) == 0x80)
      partial.push_back(v.id(r));
  }
  ASSERT_FALSE(partial.empty());
  std::vector<uint32_t> mask(static_cast<size_t>(v.words()));
  for (size_t k = 0; k < std::min<size_t>(partial.size(), 3); ++k) {
    grammar::Matcher m(g);
    ASSERT_TRUE(m.accept_bytes("\""));
    m.fill_mask(mask);
    ASSERT_TRUE(grammar::test_bit(mask, partial[k]));
    ASSERT_TRUE(m.accept_token(partial[k]));
    m.fill_mask(mask);
    // Exactly the tokens that start with a continuation byte (and complete the character validly) may follow.
    EXPECT_TRUE(mask_mismatches(m, mask).empty());
    int allowed = 0;
    for (int32_t id = 0; id < v.width(); ++id) {
      if (!grammar::test_bit(mask, id)) continue;
      ++allowed;
      const auto first = static_cast<uint8_t>(v.bytes(v.rank_of(id))[0]);
      EXPECT_EQ(first & 0xC0, 0x80) << "token " << id << " after a partial character";
    }
    EXPECT_GT(allowed, 0);
  }
}

TEST_F(GrammarQwen3, WalksWithExactMasks) {
  std::vector<std::pair<OrderedJson, std::string>> docs;
  for (const char* name : {"ai_sdk_zod", "pydantic_optional", "recursive_tree", "unicode_keys", "format_datetime"}) {
    for (const auto& e : load_corpus()) {
      if (e.name != name) continue;
      const WalkResult w = random_walk(cache_->for_schema(e.schema, {}), 11, 300, 7);
      EXPECT_EQ(w.mask_errors, 0) << name;
      if (w.finished) docs.emplace_back(e.schema, w.document);
    }
  }
  ASSERT_GE(docs.size(), 4u);
  for (const Verdict& v : ajv_validate(docs)) EXPECT_TRUE(v.valid) << v.error;
}

}  // namespace
}  // namespace duet::testing
