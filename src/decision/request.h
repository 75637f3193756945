#pragma once
// A System One decision request, validated (../shared/spec/systemone.md): the state, the typed questions in
// request order with their options in the order the prompt lists them, and the answer options.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace duet::decision {

using Json = nlohmann::ordered_json;  // key order is meaningful: questions and choice options keep the client's

// The value is the head's type id (type_embedding row).
enum class QuestionType : uint8_t { noul = 0, choice = 1, score = 2 };
std::string_view type_name(QuestionType type);

struct Option {
  std::string id;
  std::optional<std::string> description;  // none: the option's text has no "description"
};

struct Question {
  std::string id;
  QuestionType type = QuestionType::noul;
  std::string instructions;           // what the prompt shows: render(instructions), or the id (validation.cc)
  std::vector<Option> options;        // in ENCODED order: noul true, false; choice by code point; score "0", "1", ...
  std::vector<size_t> request_order;  // options[request_order[k]] is the k-th option as the client listed it
  std::vector<std::string> legend;    // score: the level descriptions verbatim
};

enum class Truncation : uint8_t { refuse, state_head };
enum class ConfidenceFormula : uint8_t { max_p, typesafe, cloudflare };

struct DecisionRequest {
  std::string model;
  Json state;                       // any JSON value; a string is used as is
  std::vector<Question> questions;  // request order
  Truncation truncation = Truncation::refuse;
  bool raw = false;  // unrounded probabilities and the logits
  ConfidenceFormula confidence_formula = ConfidenceFormula::max_p;
  bool envelope = false;  // wrap the answer as Cloudflare's API does: {"result", "success", "errors", "messages"}
};

// Which requests are taken. `hosted` (the default): the limits the hosted service enforces (below). `reference`
// (`duet serve --decision-limits reference`): what the protocol's reference implementation takes, which has none of
// them: any number of questions (at least one), ids of any text, choices of one option or more, scores of one level
// or more. Both refuse what the spec refuses: a wrong type, an empty span, a prompt over the token budget.
enum class DecisionLimits : uint8_t { hosted, reference };

// The hosted limits.
constexpr size_t kMaxQuestions = 64;
constexpr size_t kMaxIdLength = 100;  // of [A-Za-z0-9_.-]
constexpr size_t kMinOptions = 2;
constexpr size_t kMaxChoiceOptions = 255;
constexpr size_t kMaxScoreLevels = 10;

// Parses a request body as Python's json.loads would (keys in order, big integers exact). DecisionError 400
// invalid_json when it is not a JSON object.
Json parse_decision_body(std::string_view body);

// Checks every field; DecisionError 422 with a stable code naming the question and field of the first problem.
DecisionRequest validate_decision_request(const Json& body, DecisionLimits limits = DecisionLimits::hosted);

}  // namespace duet::decision
