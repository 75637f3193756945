// logprobs[].bytes are a token's raw bytes: a token holding part of a UTF-8 character shows U+FFFD as its text but
// its own bytes, so a client can join the pieces of a character split across tokens.
#include <gtest/gtest.h>

#include <string>

#include "../tests_dir.h"
#include "server/generation.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace duet::server {
namespace {

const std::string kDemo = ::duet::testing::tests_dir() + "/../models/demo";

std::string bytes_of(const nlohmann::json& list) {
  std::string out;
  for (const auto& b : list) out += static_cast<char>(b.get<int>());
  return out;
}

TEST(LogprobBytes, ArePartialCharactersRawBytes) {
  auto tokenizer = tokenizer::Tokenizer::load_dir(kDemo);
  int partial = 0;
  for (int32_t id = 0; id < tokenizer->vocab_size(); ++id) {
    const std::string* raw = tokenizer->token_bytes(id);
    if (!raw) continue;
    EXPECT_EQ(bytes_of(token_bytes(*tokenizer, id)), *raw) << "id " << id;
    if (tokenizer::utf8_invalid_at(*raw) == raw->size()) continue;
    ++partial;  // its text is repaired, its bytes are not
    EXPECT_NE(token_text(*tokenizer, id), *raw) << "id " << id;
  }
  EXPECT_GT(partial, 0) << "the demo vocabulary has byte tokens (0x80-0xFF) that hold part of a character";
}

TEST(LogprobBytes, JoinASplitCharacter) {
  auto tokenizer = tokenizer::Tokenizer::load_dir(kDemo);
  const std::string text = "\xe2\x82\xac\xf0\x9f\x98\x80";  // a euro sign and an emoji, rare enough to be split
  std::string joined;
  for (int32_t id : tokenizer->encode(text)) joined += bytes_of(token_bytes(*tokenizer, id));
  EXPECT_EQ(joined, text);
}

}  // namespace
}  // namespace duet::server
