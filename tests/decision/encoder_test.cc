// The decision prompt against the goldens of an independent Python encoder (tools/decision_reference.py, through
// HF tokenizers): for every request the ids, the spans and the token counts, or the same refusal with the same
// counts; with the demo tokenizer and with qwen35-synthetic (the added tokens at Qwen3.5's real ids).
#include "decision/encoder.h"

#include <gtest/gtest.h>

#include "decision_fixtures.h"
#include "tokenizer/tokenizer.h"

namespace duet::decision {
namespace {

using testing::decision_goldens;

DecisionRequest request_of(const nlohmann::json& golden) {
  return validate_decision_request(parse_decision_body(golden.at("body").get<std::string>()));
}

// Spans [[begin, end], ...] of an encoding, questions then their options, as the goldens list them.
nlohmann::json spans_of(const Encoding& encoding) {
  nlohmann::json out = nlohmann::json::array();
  for (const EncodedQuestion& q : encoding.questions) {
    nlohmann::json options = nlohmann::json::array();
    for (const Span& o : q.options) options.push_back({o.begin, o.end});
    out.push_back({{"span", {q.span.begin, q.span.end}}, {"options", options}, {"type_id", static_cast<int>(q.type)}});
  }
  return out;
}
nlohmann::json golden_spans(const nlohmann::json& questions) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& q : questions) {
    nlohmann::json options = nlohmann::json::array();
    for (const auto& o : q.at("options")) options.push_back(o.at("span"));
    out.push_back({{"span", q.at("span")}, {"options", options}, {"type_id", q.at("type_id")}});
  }
  return out;
}

class DecisionEncoder : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    demo_ = tokenizer::Tokenizer::load_dir(testing::demo_dir());
    qwen35_ = tokenizer::Tokenizer::load_dir(testing::qwen35_tokenizer_dir());
  }
  static void TearDownTestSuite() {
    demo_.reset();
    qwen35_.reset();
  }
  static std::unique_ptr<tokenizer::Tokenizer> demo_, qwen35_;
};
std::unique_ptr<tokenizer::Tokenizer> DecisionEncoder::demo_, DecisionEncoder::qwen35_;

TEST_F(DecisionEncoder, EveryGoldenRequest) {
  const nlohmann::json& cases = decision_goldens("demo").at("cases");
  ASSERT_GE(cases.size(), 40u);
  int accepted = 0, refused = 0;
  for (const auto& golden : cases) {
    SCOPED_TRACE(golden.at("name").get<std::string>());
    const DecisionRequest request = request_of(golden);
    const int32_t max_length = golden.at("max_length");
    const std::string expect = golden.at("expect");
    if (expect != "ok") {
      for (const tokenizer::Tokenizer* tokenizer : {demo_.get(), qwen35_.get()}) {
        try {
          encode_decision(*tokenizer, request, max_length);
          ADD_FAILURE() << "accepted; expected " << expect;
        } catch (const BudgetExceeded& error) {
          EXPECT_EQ(error.code(), expect);
          EXPECT_EQ(error.status(), 413);
          EXPECT_EQ(error.fixed_tokens(), golden.at("counts").at("fixed_tokens"));
          EXPECT_EQ(error.state_tokens(), golden.at("counts").at("state_tokens"));
          EXPECT_EQ(error.max_length(), golden.at("counts").at("max_length"));
        }
      }
      ++refused;
      continue;
    }
    const nlohmann::json& want = golden.at("encoding");
    const Encoding got = encode_decision(*demo_, request, max_length);
    EXPECT_EQ(got.ids, want.at("ids").get<std::vector<int32_t>>());
    EXPECT_EQ(static_cast<int64_t>(got.ids.size()), want.at("input_tokens").get<int64_t>());
    EXPECT_EQ(got.fixed_tokens, want.at("fixed_tokens"));
    EXPECT_EQ(got.state_tokens, want.at("state_tokens"));
    EXPECT_EQ(got.state_tokens_dropped, want.at("state_tokens_dropped"));
    EXPECT_EQ(spans_of(got), golden_spans(want.at("questions")));
    ASSERT_EQ(got.questions.size(), request.questions.size());

    const Encoding q35 = encode_decision(*qwen35_, request, max_length);
    EXPECT_EQ(q35.ids, golden.at("qwen35_ids").get<std::vector<int32_t>>());
    EXPECT_EQ(spans_of(q35), golden_spans(golden.value("qwen35_questions", want.at("questions"))));
    ++accepted;
  }
  EXPECT_GE(accepted, 40);
  EXPECT_GE(refused, 4);
}

// The spans hold exactly the rendered instructions and option texts (decoded back), and the prompt opens with the
// prefix's special token matched, not spelled out.
TEST_F(DecisionEncoder, SpansCoverExactlyTheRenderedText) {
  const nlohmann::json& golden = decision_goldens("demo").at("cases").at(0);
  ASSERT_EQ(golden.at("name"), "spec-example");
  const DecisionRequest request = request_of(golden);
  const Encoding encoding = encode_decision(*demo_, request, kReferenceMaxLength);
  const auto text = [&](Span span) {
    return demo_->decode(
        std::span(encoding.ids).subspan(static_cast<size_t>(span.begin), static_cast<size_t>(span.size())));
  };
  EXPECT_EQ(text(encoding.questions[0].span), "Is the ticket urgent?");
  EXPECT_EQ(text(encoding.questions[1].options[0]), R"({"description":"Money","option_id":"billing"})");
  EXPECT_EQ(text(encoding.questions[1].options[1]), R"({"option_id":"tech"})");
  EXPECT_EQ(text(encoding.questions[2].options[2]), R"({"description":"major","option_id":"2"})");
  EXPECT_EQ(demo_->decode(encoding.ids).substr(0, 19), "<|im_start|>system\n");
}

// A tokenizer that writes nothing for the text "-": an instruction or option made only of it has an empty span.
class DroppingTokenizer final : public tokenizer::Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    if (text.find("\"-\"") != std::string_view::npos || text == "-") return ids;
    for (char c : text) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }
  std::string decode(std::span<const int32_t>, bool) const override { return {}; }
  int32_t vocab_size() const override { return 256; }
  std::optional<int32_t> token_to_id(std::string_view) const override { return std::nullopt; }
  bool is_special(int32_t) const override { return false; }
  std::optional<int32_t> eos_id() const override { return std::nullopt; }
  std::optional<int32_t> pad_id() const override { return std::nullopt; }
  const std::string& chat_template() const override { return empty_; }

 private:
  std::string empty_;
};

TEST(DecisionEncoderSpans, AnEmptySpanIsRefused) {
  DroppingTokenizer tokenizer;
  const auto encode = [&](const std::string& body) {
    return encode_decision(tokenizer, validate_decision_request(parse_decision_body(body)), kReferenceMaxLength);
  };
  EXPECT_NO_THROW(
      encode(R"({"model": "m", "state": "s", "questions": {"q": {"type": "noul", "instructions": "ok"}}})"));
  try {
    encode(R"({"model": "m", "state": "s", "questions": {"q": {"type": "noul", "instructions": "-"}}})");
    ADD_FAILURE() << "accepted";
  } catch (const DecisionError& error) {
    EXPECT_EQ(error.code(), "empty_span");
    EXPECT_EQ(error.param(), "questions.q.instructions");
  }
  try {
    encode(
        R"({"model": "m", "state": "s", "questions": {"q": {"type": "choice", "criteria": {"a": "-", "b": null}}}})");
    ADD_FAILURE() << "accepted";
  } catch (const DecisionError& error) {
    EXPECT_EQ(error.code(), "empty_span");
    EXPECT_EQ(error.param(), "questions.q.criteria.a");
  }
}

}  // namespace
}  // namespace duet::decision
