// The prompt cache's turn points of a chat prompt (turn_start_hints) are read off the prompt's own `<|im_start|>`
// ids. The reference is what they stand for: the length of the tokenized text before each turn header, the prompt
// cache's resume point only when the text before it encodes to exactly those first ids.
#include "server/turn_start_hints.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../tests_dir.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

// A namespace of its own: server_unit_test's files compile as one (a unity build), and helper names repeat.
namespace duet::server::turn_start_hints_test {
namespace {

const std::string kDemo = ::duet::testing::tests_dir() + "/../models/demo";

tokenizer::ChatMessage msg(const std::string& role, const std::string& content) {
  tokenizer::ChatMessage m;
  m.role = role;
  m.content = content;
  return m;
}

std::string render(const std::vector<tokenizer::ChatMessage>& messages) {
  tokenizer::ChatOptions options;
  options.enable_thinking = true;
  return tokenizer::render_chat(messages, options);
}

// Token counts of the text before the last turn, the last user turn and the turn after a leading system turn: each
// prefix encoded on its own.
std::vector<int32_t> by_encoding_prefixes(const tokenizer::Tokenizer& tokenizer, const std::string& text) {
  std::vector<size_t> headers{text.rfind("<|im_start|>"), text.rfind("<|im_start|>user")};
  if (text.starts_with("<|im_start|>system")) headers.push_back(text.find("<|im_start|>", 1));
  std::vector<int32_t> out;
  for (size_t header : headers)
    if (header != std::string::npos && header > 0)
      out.push_back(static_cast<int32_t>(tokenizer.encode(text.substr(0, header)).size()));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

TEST(TurnStartHints, EqualTheTokenCountsOfTheTextBeforeEachTurn) {
  auto tokenizer = tokenizer::Tokenizer::load_dir(kDemo);
  const std::vector<std::vector<tokenizer::ChatMessage>> conversations = {
      {msg("user", "Say hello.")},
      {msg("system", "You are terse."), msg("user", "Say hello.")},
      {msg("system", "You are terse. ünïcödé and <tags>."), msg("user", "First question?"),
       msg("assistant", "First answer."), msg("user", "Second question, with\nnew lines\n\n and spaces   ")},
      {msg("user", "a"), msg("assistant", "b"), msg("user", "c")},
  };
  for (size_t c = 0; c < conversations.size(); ++c) {
    const std::string text = render(conversations[c]);
    const std::vector<int32_t> ids = tokenizer->encode(text);
    const std::vector<int32_t> hints = turn_start_hints(*tokenizer, text, ids);
    EXPECT_EQ(hints, by_encoding_prefixes(*tokenizer, text)) << "conversation " << c;
    EXPECT_FALSE(hints.empty()) << "conversation " << c;
    for (int32_t hint : hints) {  // a resume point: the first `hint` ids are the text up to a turn header
      const std::string before = tokenizer->decode(std::vector<int32_t>(ids.begin(), ids.begin() + hint));
      EXPECT_TRUE(text.starts_with(before) && text.compare(before.size(), 12, "<|im_start|>") == 0)
          << "conversation " << c << " hint " << hint;
    }
  }
}

// Control: ids that are not the text's (a header's id missing) give no hints rather than wrong ones.
TEST(TurnStartHints, IdsWithoutTheTextsTurnHeadersGiveNone) {
  auto tokenizer = tokenizer::Tokenizer::load_dir(kDemo);
  const std::string text = render({msg("system", "s"), msg("user", "u")});
  std::vector<int32_t> ids = tokenizer->encode(text);
  ASSERT_FALSE(turn_start_hints(*tokenizer, text, ids).empty());
  const int32_t turn = *tokenizer->token_to_id("<|im_start|>");
  std::erase(ids, turn);
  EXPECT_TRUE(turn_start_hints(*tokenizer, text, ids).empty());
}

}  // namespace
}  // namespace duet::server::turn_start_hints_test
