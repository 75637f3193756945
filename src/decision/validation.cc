// Parsing and validating a decision request body. Every problem is refused with the first one found, in a fixed
// order (top-level fields, then each question in request order), so the same body always gets the same answer.
#include <fmt/format.h>

#include "base/exact_json.h"
#include "decision/errors.h"
#include "decision/options.h"
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

// Ids as the hosted service allows them: 1 to 100 of [A-Za-z0-9_.-].
bool valid_id(const std::string& id) {
  if (id.empty() || id.size() > kMaxIdLength) return false;
  for (char c : id) {
    const bool ok =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
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
Json checked_criteria(const Json& question, QuestionType type, const std::string& prefix) {
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
      if (criteria->size() < kMinOptions || criteria->size() > kMaxChoiceOptions)
        refuse("invalid_option_count", param, "a choice question needs {} to {} options, got {}", kMinOptions,
               kMaxChoiceOptions, criteria->size());
      for (const auto& [key, value] : criteria->items()) {
        if (!valid_id(key))
          refuse("invalid_option_id", param, "option id `{}` must be 1 to {} of A-Z a-z 0-9 _ . -", key.substr(0, 120),
                 kMaxIdLength);
        check_description(value, param + "." + key);
      }
      return *criteria;
    case QuestionType::score:
      if (criteria == nullptr) refuse("missing_field", param, "a score question needs criteria: a list of levels");
      if (!criteria->is_array()) wrong_type(param, *criteria, "an array of level descriptions");
      if (criteria->size() < kMinOptions || criteria->size() > kMaxScoreLevels)
        refuse("invalid_option_count", param, "a score question needs {} to {} levels, got {}", kMinOptions,
               kMaxScoreLevels, criteria->size());
      for (size_t level = 0; level < criteria->size(); ++level)
        if (!(*criteria)[level].is_string())
          wrong_type(fmt::format("{}[{}]", param, level), (*criteria)[level], "a string");
      return *criteria;
  }
  return nullptr;
}

Question checked_question(const std::string& id, const Json& body) {
  const std::string prefix = "questions." + id.substr(0, 120) + ".";
  if (!valid_id(id))
    refuse("invalid_question_id", "questions." + id.substr(0, 120),
           "a question id must be 1 to {} of A-Z a-z 0-9 _ . -", kMaxIdLength);
  if (!body.is_object()) wrong_type("questions." + id, body, "an object {\"type\": ..., ...}");
  check_fields(body, {"type", "instructions", "criteria"}, prefix);
  Question question;
  question.id = id;
  question.type = question_type(body, prefix);
  question.instructions = id;  // null and "" mean the id, as in the reference
  if (const Json* instructions = optional_field(body, "instructions")) {
    if (!instructions->is_string()) wrong_type(prefix + "instructions", *instructions, "a string or null");
    if (!instructions->get_ref<const std::string&>().empty()) question.instructions = instructions->get<std::string>();
  }
  const Json criteria = checked_criteria(body, question.type, prefix);
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

DecisionRequest validate_decision_request(const Json& body) {
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
  if (questions->empty() || questions->size() > kMaxQuestions)
    refuse("invalid_question_count", "questions", "1 to {} questions are allowed, got {}", kMaxQuestions,
           questions->size());
  for (const auto& [id, question] : questions->items()) request.questions.push_back(checked_question(id, question));

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
