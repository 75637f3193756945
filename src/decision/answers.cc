#include "decision/answers.h"

#include <algorithm>

#include "base/error.h"
#include "base/python_float.h"
#include "decision/head_math.h"
#include "tokenizer/python_json.h"

namespace duet::decision {

namespace {

constexpr int kDigits = 4;

}  // namespace

std::vector<std::vector<float>> question_probabilities(const DecisionRequest& request, std::span<const float> logits) {
  std::vector<std::vector<float>> out;
  size_t next = 0;
  for (const Question& question : request.questions) {
    if (next + question.options.size() > logits.size())
      fail("decision: {} logits for more options than that", logits.size());
    std::vector<float> p(logits.begin() + next, logits.begin() + next + question.options.size());
    softmax(p);
    out.push_back(std::move(p));
    next += question.options.size();
  }
  if (next != logits.size()) fail("decision: {} logits for {} options", logits.size(), next);
  return out;
}

double confidence(std::span<const float> probabilities, ConfidenceFormula formula) {
  const auto k = static_cast<double>(probabilities.size());
  const double top = *std::max_element(probabilities.begin(), probabilities.end());
  // One option (the reference limits allow it): both rescaled formulas are 0 / 0; its one answer is certain.
  if (probabilities.size() == 1 && formula != ConfidenceFormula::max_p) return 1.0;
  switch (formula) {
    case ConfidenceFormula::max_p:
      return top;
    case ConfidenceFormula::typesafe:
      return std::min(1.0, std::max(0.0, (top - 1.0 / k) / (1.0 - 1.0 / k)));
    case ConfidenceFormula::cloudflare: {
      double squares = 0;
      for (float p : probabilities) squares += static_cast<double>(p) * p;
      return (squares - 1.0 / k) / (1.0 - 1.0 / k);
    }
  }
  return top;
}

Json answers_json(const DecisionRequest& request, const std::vector<std::vector<float>>& probabilities,
                  std::span<const float> logits) {
  // Python computes with the fp32 values widened to doubles; so do we, then round (or not) for the wire.
  const auto number = [&](double x) { return Json(request.raw ? x : python_round(x, kDigits)); };
  Json answers = Json::object();
  size_t first_logit = 0;
  for (size_t i = 0; i < request.questions.size(); ++i) {
    const Question& question = request.questions[i];
    const std::vector<float>& p = probabilities[i];  // encoding order
    Json answer = {{"type", std::string(type_name(question.type))}};
    Json by_option = Json::object();  // the client's order
    for (size_t position : question.request_order) by_option[question.options[position].id] = number(p[position]);
    const double conf = confidence(p, request.confidence_formula);
    switch (question.type) {
      case QuestionType::noul:
        answer["noul"] = number(p[0]);  // options are true, false
        break;
      case QuestionType::choice: {
        const float top = *std::max_element(p.begin(), p.end());
        size_t chosen = question.request_order.front();
        for (size_t position : question.request_order)  // the first maximum in the client's order
          if (p[position] == top) {
            chosen = position;
            break;
          }
        answer["choice"] = question.options[chosen].id;
        answer["confidence"] = number(conf);
        answer["probabilities"] = std::move(by_option);
        break;
      }
      case QuestionType::score: {
        double expected = 0;
        for (size_t level = 0; level < p.size(); ++level) expected += static_cast<double>(level) * p[level];
        answer["score"] = number(expected);
        answer["confidence"] = number(conf);
        Json legend = Json::object();
        for (size_t level = 0; level < question.legend.size(); ++level)
          legend[std::to_string(level)] = question.legend[level];
        answer["legend"] = std::move(legend);
        answer["probabilities"] = std::move(by_option);
        break;
      }
    }
    if (request.raw) {
      Json raw_logits = Json::object();
      for (size_t position : question.request_order)
        raw_logits[question.options[position].id] = static_cast<double>(logits[first_logit + position]);
      answer["logits"] = std::move(raw_logits);
    }
    first_logit += question.options.size();
    answers[question.id] = std::move(answer);
  }
  return answers;
}

std::string decision_response(const DecisionRequest& request, const Encoding& encoding, std::span<const float> logits,
                              const std::string& model, int32_t cached_tokens) {
  Json usage = {{"input_tokens", encoding.ids.size()}, {"output_tokens", 0}};
  if (request.truncation == Truncation::state_head) usage["state_tokens_dropped"] = encoding.state_tokens_dropped;
  if (cached_tokens > 0) usage["input_tokens_details"] = {{"cached_tokens", cached_tokens}};
  Json body = {{"model", model},
               {"answers", answers_json(request, question_probabilities(request, logits), logits)},
               {"usage", std::move(usage)}};
  if (request.envelope)
    body = {{"result", std::move(body)}, {"success", true}, {"errors", Json::array()}, {"messages", Json::array()}};
  return tokenizer::python_json(body, {.compact = true});
}

}  // namespace duet::decision
