// Every refusal of a decision request, by status, stable code and the parameter it names; and what a valid
// request becomes (option orders, instructions).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "decision/errors.h"
#include "decision/options.h"
#include "decision/request.h"

namespace duet::decision {
namespace {

struct Refusal {
  const char* name;
  std::string body;
  int status;
  const char* code;
  const char* param;
  bool hosted_only = false;  // a hosted limit: taken under DecisionLimits::reference
};

const std::string kQ = R"("questions": {"q": {"type": "noul"}})";
std::string body(const std::string& fields) { return "{" + fields + "}"; }
std::string with_question(const std::string& question) {
  return body(R"("model": "demo", "state": "s", "questions": {"q": )" + question + "}");
}

TEST(DecisionValidation, EveryRefusalHasItsStatusCodeAndParam) {
  // {"o0": null, "o1": null, ...} and {"q0": {"type": "noul"}, ...}
  const auto members = [](int count, const char* prefix, const char* value) {
    std::string text;
    for (int i = 0; i < count; ++i) text += fmt::format("{}\"{}{}\": {}", i ? "," : "", prefix, i, value);
    return text;
  };
  const std::string choices_256 = members(256, "o", "null");
  const std::string questions_65 = members(65, "q", R"({"type": "noul"})");
  const Refusal cases[] = {
      {"empty body", "", 400, "invalid_json", ""},
      {"not json", "{\"model\": ", 400, "invalid_json", ""},
      {"not an object", "[1, 2]", 400, "invalid_json", ""},
      {"too deep", std::string(100, '[') + std::string(100, ']'), 400, "invalid_json", ""},
      {"bad utf-8", "{\"model\": \"\xff\"}", 400, "invalid_json", ""},
      {"number beyond a double", body(R"("model": "demo", "state": 1e400, )" + kQ), 400, "invalid_json", ""},
      {"unknown field", body(R"("model": "demo", "state": 1, "temperature": 0, )" + kQ), 422, "unknown_field",
       "temperature"},
      {"model missing", body(R"("state": 1, )" + kQ), 422, "missing_field", "model"},
      {"model null", body(R"("model": null, "state": 1, )" + kQ), 422, "missing_field", "model"},
      {"model not a string", body(R"("model": 7, "state": 1, )" + kQ), 422, "wrong_type", "model"},
      {"state missing", body(R"("model": "demo", )" + kQ), 422, "missing_field", "state"},
      {"questions missing", body(R"("model": "demo", "state": 1)"), 422, "missing_field", "questions"},
      {"questions a list", body(R"("model": "demo", "state": 1, "questions": [])"), 422, "wrong_type", "questions"},
      {"no questions", body(R"("model": "demo", "state": 1, "questions": {})"), 422, "invalid_question_count",
       "questions"},
      {"65 questions", body(R"("model": "demo", "state": 1, "questions": {)" + questions_65 + "}"), 422,
       "invalid_question_count", "questions", true},
      {"bad question id", body(R"("model": "demo", "state": 1, "questions": {"a b": {"type": "noul"}})"), 422,
       "invalid_question_id", "questions.a b", true},
      {"empty question id", body(R"("model": "demo", "state": 1, "questions": {"": {"type": "noul"}})"), 422,
       "invalid_question_id", "questions.", true},
      {"101-character id",
       body(R"("model": "demo", "state": 1, "questions": {")" + std::string(101, 'x') + R"(": {"type": "noul"}})"), 422,
       "invalid_question_id", nullptr, true},
      {"question not an object", with_question("\"noul\""), 422, "wrong_type", "questions.q"},
      {"unknown question field", with_question(R"({"type": "noul", "weight": 2})"), 422, "unknown_field",
       "questions.q.weight"},
      {"type missing", with_question(R"({"instructions": "x"})"), 422, "missing_field", "questions.q.type"},
      {"type not a string", with_question(R"({"type": 1})"), 422, "wrong_type", "questions.q.type"},
      {"unknown type", with_question(R"({"type": "yesno"})"), 422, "invalid_question_type", "questions.q.type"},
      {"noul criteria a list", with_question(R"({"type": "noul", "criteria": ["y", "n"]})"), 422, "wrong_type",
       "questions.q.criteria"},
      {"noul criteria key", with_question(R"({"type": "noul", "criteria": {"yes": "y"}})"), 422, "invalid_criteria",
       "questions.q.criteria.yes"},
      {"noul description a number", with_question(R"({"type": "noul", "criteria": {"true": 1}})"), 422, "wrong_type",
       "questions.q.criteria.true"},
      {"choice without criteria", with_question(R"({"type": "choice"})"), 422, "missing_field", "questions.q.criteria"},
      {"choice criteria a list", with_question(R"({"type": "choice", "criteria": ["a", "b"]})"), 422, "wrong_type",
       "questions.q.criteria"},
      {"choice with no options", with_question(R"({"type": "choice", "criteria": {}})"), 422, "invalid_option_count",
       "questions.q.criteria"},
      {"choice with 1 option", with_question(R"({"type": "choice", "criteria": {"a": null}})"), 422,
       "invalid_option_count", "questions.q.criteria", true},
      {"choice with 256 options", with_question(R"({"type": "choice", "criteria": {)" + choices_256 + "}}"), 422,
       "invalid_option_count", "questions.q.criteria", true},
      {"bad option id", with_question(R"({"type": "choice", "criteria": {"a": null, "b/c": null}})"), 422,
       "invalid_option_id", "questions.q.criteria", true},
      {"non-ASCII option ids", with_question(R"({"type": "choice", "criteria": {"ä": null, "Ω": "omega"}})"), 422,
       "invalid_option_id", "questions.q.criteria", true},
      {"option description an object", with_question(R"({"type": "choice", "criteria": {"a": null, "b": {}}})"), 422,
       "wrong_type", "questions.q.criteria.b"},
      {"score without criteria", with_question(R"({"type": "score"})"), 422, "missing_field", "questions.q.criteria"},
      {"score criteria an object", with_question(R"({"type": "score", "criteria": {"0": "a", "1": "b"}})"), 422,
       "wrong_type", "questions.q.criteria"},
      {"score with no levels", with_question(R"({"type": "score", "criteria": []})"), 422, "invalid_option_count",
       "questions.q.criteria"},
      {"score with 1 level", with_question(R"({"type": "score", "criteria": ["only"]})"), 422, "invalid_option_count",
       "questions.q.criteria", true},
      {"score with 11 levels",
       with_question(R"({"type": "score", "criteria": ["0","1","2","3","4","5","6","7","8","9","10"]})"), 422,
       "invalid_option_count", "questions.q.criteria", true},
      {"score level null", with_question(R"({"type": "score", "criteria": ["a", null]})"), 422, "wrong_type",
       "questions.q.criteria[1]"},
      {"truncation unknown", body(R"("model": "demo", "state": 1, "truncation": "state_tail", )" + kQ), 422,
       "invalid_value", "truncation"},
      {"truncation not a string", body(R"("model": "demo", "state": 1, "truncation": true, )" + kQ), 422, "wrong_type",
       "truncation"},
      {"raw not a boolean", body(R"("model": "demo", "state": 1, "raw": "yes", )" + kQ), 422, "wrong_type", "raw"},
      {"formula unknown", body(R"("model": "demo", "state": 1, "confidence_formula": "entropy", )" + kQ), 422,
       "invalid_value", "confidence_formula"},
      {"envelope not a boolean", body(R"("model": "demo", "state": 1, "envelope": "cloudflare", )" + kQ), 422,
       "wrong_type", "envelope"},
  };
  // Under the hosted limits every case is refused; under the reference's only those that are not hosted limits, the
  // same way. A hosted-limit refusal says what lifts it.
  for (const DecisionLimits limits : {DecisionLimits::hosted, DecisionLimits::reference}) {
    for (const Refusal& refusal : cases) {
      SCOPED_TRACE(limits == DecisionLimits::hosted ? "hosted limits" : "reference limits");
      const bool taken = limits == DecisionLimits::reference && refusal.hosted_only;
      try {
        validate_decision_request(parse_decision_body(refusal.body), limits);
        if (!taken) ADD_FAILURE() << refusal.name << ": accepted";
      } catch (const DecisionError& error) {
        if (taken) {
          ADD_FAILURE() << refusal.name << ": refused: " << error.what();
          continue;
        }
        EXPECT_EQ(error.status(), refusal.status) << refusal.name << ": " << error.what();
        EXPECT_EQ(error.code(), refusal.code) << refusal.name << ": " << error.what();
        if (refusal.param != nullptr) {
          EXPECT_EQ(error.param(), refusal.param) << refusal.name;
          // The message names the parameter (the question and field) too.
          EXPECT_NE(std::string(error.what()).find(refusal.param), std::string::npos) << error.what();
        }
        EXPECT_EQ(std::string(error.what()).find("--decision-limits reference") != std::string::npos,
                  refusal.hosted_only)
            << refusal.name << ": " << error.what();
      }
    }
  }
}

// instructions may be any JSON value, rendered as the spec's render(instructions or id): the expected texts are what
// CPython 3.11 prints for json.dumps(v, ensure_ascii=False, sort_keys=True, separators=(",", ":")), and a value
// Python reads as false gives the id.
TEST(DecisionValidation, InstructionsOfAnyJsonValueAreRendered) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"b": 1.0, "a": [true, null, "ä"]})", R"({"a":[true,null,"ä"],"b":1.0})"},
      {R"([2, {"y": 1e16, "x": 1e-5}])", R"([2,{"x":1e-05,"y":1e+16}])"},
      {"12", "12"},
      {"-0.5", "-0.5"},
      {"true", "true"},
      {"123456789012345678901234567890", "123456789012345678901234567890"},
      {R"(" ")", " "},
      {R"("Is it \"urgent\"?")", R"(Is it "urgent"?)"},
      // Python's falsy values: the id.
      {"null", "q"},
      {R"("")", "q"},
      {"false", "q"},
      {"0", "q"},
      {"0.0", "q"},
      {"-0.0", "q"},
      {"[]", "q"},
      {"{}", "q"},
  };
  for (const DecisionLimits limits : {DecisionLimits::hosted, DecisionLimits::reference}) {
    for (const auto& [value, text] : cases) {
      const DecisionRequest request = validate_decision_request(
          parse_decision_body(with_question(std::string(R"({"type": "noul", "instructions": )") + value + "}")),
          limits);
      EXPECT_EQ(request.questions.at(0).instructions, text) << value;
    }
  }
}

TEST(DecisionValidation, AValidRequestKeepsOrdersAndDefaults) {
  const DecisionRequest request = validate_decision_request(parse_decision_body(R"({
    "model": "demo", "state": null, "truncation": "state_head", "raw": true, "confidence_formula": "typesafe",
    "envelope": true,
    "questions": {
      "z_first": {"type": "noul", "instructions": ""},
      "team": {"type": "choice", "instructions": null, "criteria": {"b": "Bee", "_x": null, "A1": "a", "a1": "b"}},
      "sev": {"type": "score", "instructions": "How bad?", "criteria": ["none", "some"]},
      "ship": {"type": "noul", "criteria": {"false": "Hold"}}}})"));
  EXPECT_TRUE(request.state.is_null());
  EXPECT_EQ(request.truncation, Truncation::state_head);
  EXPECT_TRUE(request.raw);
  EXPECT_TRUE(request.envelope);
  EXPECT_EQ(request.confidence_formula, ConfidenceFormula::typesafe);
  ASSERT_EQ(request.questions.size(), 4u);
  EXPECT_EQ(request.questions[0].id, "z_first");            // request order, not sorted
  EXPECT_EQ(request.questions[0].instructions, "z_first");  // "" and null mean the id
  EXPECT_EQ(request.questions[1].instructions, "team");
  EXPECT_EQ(request.questions[2].instructions, "How bad?");
  const Question& team = request.questions[1];
  std::vector<std::string> encoded;
  for (const Option& option : team.options) encoded.push_back(option.id);
  EXPECT_EQ(encoded, (std::vector<std::string>{"A1", "_x", "a1", "b"}));  // by code point
  std::vector<std::string> listed;
  for (size_t position : team.request_order) listed.push_back(team.options[position].id);
  EXPECT_EQ(listed, (std::vector<std::string>{"b", "_x", "A1", "a1"}));  // the client's order
  EXPECT_FALSE(team.options[1].description);
  EXPECT_EQ(request.questions[2].legend, (std::vector<std::string>{"none", "some"}));
  EXPECT_EQ(request.questions[2].options[1].id, "1");
  const Question& ship = request.questions[3];
  EXPECT_EQ(ship.options[0].description, kNoulTrueDefault);  // a description not given keeps the default
  EXPECT_EQ(ship.options[1].description, "Hold");
}

}  // namespace
}  // namespace duet::decision
