#pragma once
// The answer to a decision from the head's logits, as the spec writes it: p = softmax (fp32) of each question's
// logits; noul: P(true); choice: the first maximum in the client's option order, with its probabilities in that
// order and confidence = max p; score: the expected level sum(k p_k), confidence = max p and the legend verbatim.
// Numbers rounded as Python's round(x, 4) unless the request asks for raw ones (then with the logits too).
#include <span>
#include <string>
#include <vector>

#include "decision/encoder.h"
#include "decision/request.h"

namespace duet::decision {

// Per question, its options' probabilities in encoding order (softmax over each question's logits in fp32).
std::vector<std::vector<float>> question_probabilities(const DecisionRequest& request, std::span<const float> logits);

// The confidence of one question's probabilities by `formula`: max p (the reference), TypeSafe's
// clip((max p - 1/k) / (1 - 1/k), 0, 1), or Cloudflare's hosted (sum p^2 - 1/k) / (1 - 1/k).
double confidence(std::span<const float> probabilities, ConfidenceFormula formula);

// {"question id": answer, ...} in request order, from each question's probabilities (question_probabilities) and,
// for raw answers, the logits.
Json answers_json(const DecisionRequest& request, const std::vector<std::vector<float>>& probabilities,
                  std::span<const float> logits);

// The whole response body: {"model", "answers", "usage"}, or that inside Cloudflare's envelope, written as Python's
// json.dumps writes it (shortest float repr, raw UTF-8). `usage.input_tokens_details.cached_tokens` (a duet extension,
// as the Responses API names it) only when the prompt cache resumed some of the prompt.
std::string decision_response(const DecisionRequest& request, const Encoding& encoding, std::span<const float> logits,
                              const std::string& model, int32_t cached_tokens = 0);

}  // namespace duet::decision
