#pragma once
// The decision prompt, exactly as the spec builds it: each piece tokenized ON ITS OWN (added tokens written in the
// text are matched, none are inserted) and the ids concatenated, with the half-open spans of every question's
// instructions and every option's text over the final ids.
//
//   PREFIX  STATE  SCHEMA (per question: header, instructions <- span, per option: label, text <- span)  SUFFIX
#include <cstdint>
#include <string>
#include <vector>

#include "decision/errors.h"
#include "decision/request.h"
#include "tokenizer/tokenizer.h"

namespace duet::decision {

// The reference's token budget.
constexpr int32_t kReferenceMaxLength = 16384;

struct Span {
  int32_t begin = 0;  // first id
  int32_t end = 0;    // one past the last
  int32_t size() const { return end - begin; }
};

struct EncodedQuestion {
  QuestionType type = QuestionType::noul;
  Span span;                  // the instructions (or the id)
  std::vector<Span> options;  // encoded order, as Question::options
};

struct Encoding {
  std::vector<int32_t> ids;
  int32_t fixed_tokens = 0;                // prefix + schema + suffix
  int32_t state_tokens = 0;                // the state's own tokens, before any truncation
  int32_t state_tokens_dropped = 0;        // truncation "state_head": the state's tail left out
  std::vector<EncodedQuestion> questions;  // request order
};

// A prompt that does not fit max_length: state_too_long (unless the request asks for truncation state_head), or
// schema_too_long (the prompt without its state does not fit: refused whatever the request asks). 413.
class BudgetExceeded : public DecisionError {
 public:
  BudgetExceeded(std::string code, int32_t fixed_tokens, int32_t state_tokens, int32_t max_length);
  int32_t fixed_tokens() const { return fixed_tokens_; }
  int32_t state_tokens() const { return state_tokens_; }
  int32_t max_length() const { return max_length_; }

 private:
  int32_t fixed_tokens_, state_tokens_, max_length_;
};

// Throws BudgetExceeded, or DecisionError 422 empty_span when a question's or option's text has no tokens.
Encoding encode_decision(const tokenizer::Tokenizer& tokenizer, const DecisionRequest& request, int32_t max_length);

// The prompt's fixed text (exposed for tests and tools).
extern const char* const kPromptPrefix;
extern const char* const kSchemaHeader;
extern const char* const kPromptSuffix;

}  // namespace duet::decision
