// Parsing and validating a decision request body. Every problem is refused with the first one found, in a fixed
// order (top-level fields, then each question in request order), so the same body always gets the same answer.
#include <fmt/format.h>

#include <limits>

#include "base/exact_json.h"
#include "decision/errors.h"
#include "decision/options.h"
#include "decision/render.h"
#include "decision/request.h"

namespace duet::decision {

std::string_view type_name(QuestionType type) {
  switch (type) {
    case QuestionType::noul:
      return "noul";
    case QuestionType::choice:
      return "choice";
    case QuestionType::score:
      return "score";
  }
  return "unknown";
}

namespace {

const char* json_type(const Json& value) {
  if (exact_integer_text(value) || value.is_number_integer()) return "integer";
  if (value.is_number_float()) return "number";
  return value.type_name();
}

[[noreturn]] void wrong_type(const std::string& param, const Json& value, const char* expected) {
  refuse("wrong_type", param, "expected {}, got {}", expected, json_type(value));
}

void check_fields(const Json& object, std::initializer_list<std::string_view> known, const std::string& prefix) {
  for (const auto& [key, value] : object.items()) {
    bool listed = false;
    for (std::string_view name : known) listed = listed || key == name;
    if (!listed) refuse("unknown_field", prefix + key, "duet does not know this field (see docs/api.md)");
  }
}

// What a request may hold under its limits (request.h, DecisionLimits): the hosted service's, or the reference's, whose
// only bound is the token budget (the encoder's).
constexpr size_t kUnbounded = std::numeric_limits<size_t>::max();
struct Bounds {
  bool hosted = true;  // ids of [A-Za-z0-9_.-]{1,100}
  size_t max_questions = kMaxQuestions;
  size_t min_options = kMinOptions;
  size_t max_choice_options = kMaxChoiceOptions;
  size_t max_score_levels = kMaxScoreLevels;
};
Bounds bounds_of(DecisionLimits limits) {
  if (limits == DecisionLimits::hosted) return {};
  return {.hosted = false,
          .max_questions = kUnbounded,
          .min_options = 1,
          .max_choice_options = kUnbounded,
          .max_score_levels = kUnbounded};
}
// "2 to 255", or "at least 1" where there is no upper bound.
std::string count_range(size_t min, size_t max) {
  return max == kUnbounded ? fmt::format("at least {}", min) : fmt::format("{} to {}", min, max);
}
// Where a refusal comes from the hosted limits, what lifts them.
constexpr const char* kHostedHint = " (the hosted limits; `duet serve --decision-limits reference` lifts them)";
// The hint, for a count refused under the hosted limits that the reference would take.
const char* hint(const Bounds& bounds, bool reference_takes) {
  return bounds.hosted && reference_takes ? kHostedHint : "";
}

// Ids as the hosted service allows them: 1 to 100 of [A-Za-z0-9_.-]. The reference takes any text.
bool valid_id(const std::string& id, const Bounds& bounds) {
  if (!bounds.hosted) return true;
  if (id.empty() || id.size() > kMaxIdLength) return false;
  for (char c : id) {
    const bool ok =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Python's truth value of a JSON value: the spec renders `instructions or id`, so null, false, 0, 0.0, "", [] and {}
// give the id.
bool python_truthy(const Json& value) {
  if (exact_integer_text(value)) return true;  // longer than 64 bits: never zero
  switch (value.type()) {
    case Json::value_t::null:
      return false;
    case Json::value_t::boolean:
      return value.get<bool>();
    case Json::value_t::number_integer:
      return value.get<int64_t>() != 0;
    case Json::value_t::number_unsigned:
      return value.get<uint64_t>() != 0;
    case Json::value_t::number_float:
      return value.get<double>() != 0.0;  // -0.0 too
    case Json::value_t::string:
      return !value.get_ref<const std::string&>().empty();
    default:
      return !value.empty();  // array, object (nlohmann's empty() is false for every string)
  }
}

// A field that is absent or null reads as nullptr.
const Json* optional_field(const Json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

// A description: a string, or null for none.
void check_description(const Json& value, const std::string& param) {
  if (!value.is_string() && !value.is_null()) wrong_type(param, value, "a string or null");
}

QuestionType question_type(const Json& question, const std::string& prefix) {
  const Json* type = optional_field(question, "type");
  if (type == nullptr) refuse("missing_field", prefix + "type", "every question needs a type: noul, choice or score");
  if (!type->is_string()) wrong_type(prefix + "type", *type, "a string");
  const auto& name = type->get_ref<const std::string&>();
  if (name == "noul") return QuestionType::noul;
  if (name == "choice") return QuestionType::choice;
  if (name == "score") return QuestionType::score;
  refuse("invalid_question_type", prefix + "type", "`{}` is not a question type; use noul, choice or score",
         name.substr(0, 100));
}

// Checks criteria for the type and returns them (null when a noul question has none).
Json checked_criteria(const Json& question, QuestionType type, const std::string& prefix, const Bounds& bounds) {
  const std::string param = prefix + "criteria";
  const Json* criteria = optional_field(question, "criteria");
  switch (type) {
    case QuestionType::noul:
      if (criteria == nullptr) return nullptr;
      if (!criteria->is_object()) wrong_type(param, *criteria, "an object {\"true\": ..., \"false\": ...}");
      for (const auto& [key, value] : criteria->items()) {
        if (key != "true" && key != "false")
          refuse("invalid_criteria", param + "." + key, "a noul question's criteria may only describe true and false");
        check_description(value, param + "." + key);
      }
      return *criteria;
    case QuestionType::choice:
      if (criteria == nullptr) refuse("missing_field", param, "a choice question needs criteria: option id -> text");
      if (!criteria->is_object()) wrong_type(param, *criteria, "an object of option id -> description or null");
      if (criteria->size() < bounds.min_options || criteria->size() > bounds.max_choice_options)
        refuse("invalid_option_count", param, "a choice question needs {} options, got {}{}",
               count_range(bounds.min_options, bounds.max_choice_options), criteria->size(),
               hint(bounds, !criteria->empty()));
      for (const auto& [key, value] : criteria->items()) {
        if (!valid_id(key, bounds))
          refuse("invalid_option_id", param, "option id `{}` must be 1 to {} of A-Z a-z 0-9 _ . -{}",
                 key.substr(0, 120), kMaxIdLength, kHostedHint);
        check_description(value, param + "." + key);
      }
      return *criteria;
    case QuestionType::score:
      if (criteria == nullptr) refuse("missing_field", param, "a score question needs criteria: a list of levels");
      if (!criteria->is_array()) wrong_type(param, *criteria, "an array of level descriptions");
      if (criteria->size() < bounds.min_options || criteria->size() > bounds.max_score_levels)
        refuse("invalid_option_count", param, "a score question needs {} levels, got {}{}",
               count_range(bounds.min_options, bounds.max_score_levels), criteria->size(),
               hint(bounds, !criteria->empty()));
      for (size_t level = 0; level < criteria->size(); ++level)
        if (!(*criteria)[level].is_string())
          wrong_type(fmt::format("{}[{}]", param, level), (*criteria)[level], "a string");
      return *criteria;
  }
  return nullptr;
}

Question checked_question(const std::string& id, const Json& body, const Bounds& bounds) {
  const std::string prefix = "questions." + id.substr(0, 120) + ".";
  if (!valid_id(id, bounds))
    refuse("invalid_question_id", "questions." + id.substr(0, 120),
           "a question id must be 1 to {} of A-Z a-z 0-9 _ . -{}", kMaxIdLength, kHostedHint);
  if (!body.is_object()) wrong_type("questions." + id, body, "an object {\"type\": ..., ...}");
  check_fields(body, {"type", "instructions", "criteria"}, prefix);
  Question question;
  question.id = id;
  question.type = question_type(body, prefix);
  // Any JSON value, rendered (a string as is); one that Python reads as false (null, "", 0, [], ...) means the id.
  const auto instructions = body.find("instructions");
  question.instructions =
      instructions != body.end() && python_truthy(*instructions) ? render(*instructions) : question.id;
  const Json criteria = checked_criteria(body, question.type, prefix, bounds);
  OrderedOptions options = order_options(question.type, criteria);
  question.options = std::move(options.encoded);
  question.request_order = std::move(options.request_order);
  if (question.type == QuestionType::score)
    for (const Json& level : criteria) question.legend.push_back(level.get<std::string>());
  return question;
}

template <typename Enum>
Enum checked_choice(const Json& body, const char* key, std::initializer_list<std::pair<const char*, Enum>> values,
                    Enum absent) {
  const Json* value = optional_field(body, key);
  if (value == nullptr) return absent;
  std::string names;
  for (const auto& [name, choice] : values) names += (names.empty() ? "" : ", ") + std::string(name);
  if (!value->is_string()) wrong_type(key, *value, "a string");
  for (const auto& [name, choice] : values)
    if (value->get_ref<const std::string&>() == name) return choice;
  refuse("invalid_value", key, "`{}` is not one of {}", value->get_ref<const std::string&>().substr(0, 100), names);
}

}  // namespace

Json parse_decision_body(std::string_view body) {
  auto invalid = [](const std::string& message) { return DecisionError(400, "invalid_json", "", message); };
  if (body.empty()) throw invalid("the request body is empty; expected a JSON object");
  Json parsed;
  try {
    parsed = parse_exact_json(body);
  } catch (const JsonLimitError& e) {
    if (e.limit() == JsonLimitError::Limit::depth) throw invalid(e.about("the request body"));
    throw DecisionError(413, "json_too_large", e.path(), e.about("the request body"));
  } catch (const nlohmann::json::exception& e) {
    throw invalid(std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!parsed.is_object())
    throw invalid(fmt::format("the request body must be a JSON object, got {}", json_type(parsed)));
  return parsed;
}

DecisionRequest validate_decision_request(const Json& body, DecisionLimits limits) {
  const Bounds bounds = bounds_of(limits);
  check_fields(body, {"model", "state", "questions", "truncation", "raw", "confidence_formula", "envelope"}, "");
  DecisionRequest request;
  const Json* model = optional_field(body, "model");
  if (model == nullptr) refuse("missing_field", "model", "the model to ask is required");
  if (!model->is_string()) wrong_type("model", *model, "a string");
  request.model = model->get<std::string>();
  // state may be null (it renders as "null"); only its absence is refused.
  if (!body.contains("state")) refuse("missing_field", "state", "the state to decide on is required (any JSON value)");
  request.state = body.at("state");

  const Json* questions = optional_field(body, "questions");
  if (questions == nullptr) refuse("missing_field", "questions", "at least one question is required");
  if (!questions->is_object()) wrong_type("questions", *questions, "an object of question id -> question");
  if (questions->empty() || questions->size() > bounds.max_questions)
    refuse("invalid_question_count", "questions", "{} questions are allowed, got {}{}",
           count_range(1, bounds.max_questions), questions->size(), hint(bounds, !questions->empty()));
  for (const auto& [id, question] : questions->items())
    request.questions.push_back(checked_question(id, question, bounds));

  request.truncation = checked_choice<Truncation>(
      body, "truncation", {{"none", Truncation::refuse}, {"state_head", Truncation::state_head}}, Truncation::refuse);
  if (const Json* raw = optional_field(body, "raw")) {
    if (!raw->is_boolean()) wrong_type("raw", *raw, "a boolean");
    request.raw = raw->get<bool>();
  }
  request.confidence_formula = checked_choice<ConfidenceFormula>(body, "confidence_formula",
                                                                 {{"max_p", ConfidenceFormula::max_p},
                                                                  {"typesafe", ConfidenceFormula::typesafe},
                                                                  {"cloudflare", ConfidenceFormula::cloudflare}},
                                                                 ConfidenceFormula::max_p);
  if (const Json* envelope = optional_field(body, "envelope")) {
    if (!envelope->is_boolean()) wrong_type("envelope", *envelope, "a boolean");
    request.envelope = envelope->get<bool>();
  }
  return request;
}

}  // namespace duet::decision
