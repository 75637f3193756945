// Answers from probabilities against the reference's own answers (tools/decision_reference.py `answer` and
// `confidences`, in the goldens): fed the golden probabilities, every answer equals Python's, number for number
// (rounded as round(x, 4), and raw), with the first maximum in request order, the client's option order, the
// legend, and the three confidence formulas. And the response body: shape, usage, envelope, raw logits.
#include "decision/answers.h"

#include <gtest/gtest.h>

#include <cmath>

#include "decision_fixtures.h"

namespace duet::decision {
namespace {

using testing::decision_goldens;

struct GoldenAnswers {
  DecisionRequest request;
  std::vector<std::vector<float>> probabilities;
  std::vector<float> logits;
};

GoldenAnswers golden_answers(const nlohmann::json& golden, bool raw, ConfidenceFormula formula) {
  GoldenAnswers out{validate_decision_request(parse_decision_body(golden.at("body").get<std::string>())), {}, {}};
  out.request.raw = raw;
  out.request.confidence_formula = formula;
  for (const auto& result : golden.at("results")) {
    // The goldens hold fp32 values written as doubles: back to float exactly.
    out.probabilities.push_back(result.at("probabilities").get<std::vector<float>>());
    for (float logit : result.at("logits").get<std::vector<float>>()) out.logits.push_back(logit);
  }
  return out;
}

// The goldens with their key order (Python writes dicts in insertion order: type, the answer, confidence, legend,
// probabilities; options in the client's order).
const Json& ordered_goldens() {
  static const Json goldens = Json::parse(testing::read_text(testing::tests_path("fixtures/decisions/demo.json")));
  return goldens;
}

TEST(DecisionAnswers, EqualTheReferencesAnswersForEveryGoldenRequest) {
  int compared = 0;
  for (const Json& golden : ordered_goldens().at("cases")) {
    if (!golden.contains("answers")) continue;
    SCOPED_TRACE(golden.at("name").get<std::string>());
    const nlohmann::json plain = nlohmann::json::parse(golden.dump());
    // ordered_json compares members in order: values, numbers (exact doubles) and key order must all agree.
    const GoldenAnswers rounded = golden_answers(plain, false, ConfidenceFormula::max_p);
    EXPECT_EQ(answers_json(rounded.request, rounded.probabilities, rounded.logits), golden.at("answers"));
    // Raw: the same numbers unrounded, plus our extension, the logits (left out of the comparison).
    const GoldenAnswers raw = golden_answers(plain, true, ConfidenceFormula::max_p);
    Json ours = answers_json(raw.request, raw.probabilities, raw.logits);
    for (auto& [id, answer] : ours.items()) answer.erase("logits");
    EXPECT_EQ(ours, golden.at("answers_raw"));
    ++compared;
  }
  EXPECT_GE(compared, 50);
}

TEST(DecisionAnswers, ConfidenceFormulasEqualTheReferences) {
  int compared = 0;
  for (const auto& golden : decision_goldens("demo").at("cases")) {
    if (!golden.contains("confidence")) continue;
    const GoldenAnswers g = golden_answers(golden, true, ConfidenceFormula::max_p);
    for (size_t i = 0; i < g.request.questions.size(); ++i) {
      const nlohmann::json& want = golden.at("confidence").at(g.request.questions[i].id);
      EXPECT_EQ(confidence(g.probabilities[i], ConfidenceFormula::max_p), want.at("max_p").get<double>());
      EXPECT_EQ(confidence(g.probabilities[i], ConfidenceFormula::typesafe), want.at("typesafe").get<double>());
      EXPECT_NEAR(confidence(g.probabilities[i], ConfidenceFormula::cloudflare), want.at("cloudflare").get<double>(),
                  1e-15);
      ++compared;
    }
  }
  EXPECT_GE(compared, 200);
}

// The first maximum in the client's order wins a tie, whatever the encoding order.
TEST(DecisionAnswers, TiesGoToTheFirstOptionTheClientListed) {
  DecisionRequest request = validate_decision_request(parse_decision_body(
      R"({"model": "m", "state": "s", "questions": {"q": {"type": "choice", "criteria": {"zeta": null, "alpha": null, "mid": null}}}})"));
  // Encoded order: alpha, mid, zeta. alpha and zeta tie at the top; zeta comes first in the request.
  const std::vector<std::vector<float>> p = {{0.4f, 0.2f, 0.4f}};
  const Json answers = answers_json(request, p, std::vector<float>{1, 0, 1});
  EXPECT_EQ(answers["q"]["choice"], "zeta");
  EXPECT_EQ(answers["q"]["probabilities"].begin().key(), "zeta");
}

TEST(DecisionAnswers, TheResponseBody) {
  DecisionRequest request = validate_decision_request(parse_decision_body(
      R"({"model": "demo", "state": "s", "truncation": "state_head", "questions": {"u": {"type": "noul"},
          "s": {"type": "score", "criteria": ["lo", "hi"]}}})"));
  Encoding encoding;
  encoding.ids.resize(12);
  encoding.state_tokens_dropped = 3;
  const std::vector<float> logits = {0.0f, 0.0f, 1.0f, 1.0f};
  EXPECT_EQ(decision_response(request, encoding, logits, "demo"),
            R"({"model":"demo","answers":{"u":{"type":"noul","noul":0.5},"s":{"type":"score","score":0.5,)"
            R"("confidence":0.5,"legend":{"0":"lo","1":"hi"},"probabilities":{"0":0.5,"1":0.5}}},)"
            R"("usage":{"input_tokens":12,"output_tokens":0,"state_tokens_dropped":3}})");
  request.envelope = true;
  request.raw = true;
  request.truncation = Truncation::refuse;
  request.confidence_formula = ConfidenceFormula::typesafe;
  EXPECT_EQ(decision_response(request, encoding, logits, "demo"),
            R"({"result":{"model":"demo","answers":{"u":{"type":"noul","noul":0.5,"logits":{"true":0.0,"false":0.0}},)"
            R"("s":{"type":"score","score":0.5,"confidence":0.0,"legend":{"0":"lo","1":"hi"},)"
            R"("probabilities":{"0":0.5,"1":0.5},"logits":{"0":1.0,"1":1.0}}},"usage":{"input_tokens":12,)"
            R"("output_tokens":0}},"success":true,"errors":[],"messages":[]})");
}

}  // namespace
}  // namespace duet::decision
