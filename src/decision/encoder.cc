#include "decision/encoder.h"

#include <fmt/format.h>

#include "decision/render.h"

namespace duet::decision {

const char* const kPromptPrefix =
    "<|im_start|>system\nRead the complete state and schema. Decide every field jointly. Each answer must be exactly "
    "one of that field's allowed options.<|im_end|>\n<|im_start|>user\nSTATE:\n";
const char* const kSchemaHeader = "\n\nSCHEMA FIELDS:\n";
const char* const kPromptSuffix = "\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nJOINT SCHEMA DECISIONS:";

BudgetExceeded::BudgetExceeded(std::string code, int32_t fixed_tokens, int32_t state_tokens, int32_t max_length)
    : DecisionError(
          413, code, "state",
          code == "schema_too_long"
              ? fmt::format("schema_too_long: the prompt without its state takes {} tokens, over the budget of {}; "
                            "ask fewer or shorter questions",
                            fixed_tokens, max_length)
              : fmt::format("state_too_long: the state takes {} tokens and the rest of the prompt {}, over the budget "
                            "of {}; shorten the state, or send \"truncation\": \"state_head\" to keep its first {}",
                            state_tokens, fixed_tokens, max_length, max_length - fixed_tokens)),
      fixed_tokens_(fixed_tokens),
      state_tokens_(state_tokens),
      max_length_(max_length) {}

namespace {

// Appends pieces, each tokenized on its own, and records where they land.
class PieceWriter {
 public:
  explicit PieceWriter(const tokenizer::Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  Span add(const std::string& text) {
    const auto begin = static_cast<int32_t>(ids_.size());
    const std::vector<int32_t> piece = tokenizer_.encode(text);
    ids_.insert(ids_.end(), piece.begin(), piece.end());
    return {begin, static_cast<int32_t>(ids_.size())};
  }
  std::vector<int32_t>& ids() { return ids_; }

 private:
  const tokenizer::Tokenizer& tokenizer_;
  std::vector<int32_t> ids_;
};

void shift(Span& span, int32_t by) {
  span.begin += by;
  span.end += by;
}

}  // namespace

Encoding encode_decision(const tokenizer::Tokenizer& tokenizer, const DecisionRequest& request, int32_t max_length) {
  const std::vector<int32_t> prefix = tokenizer.encode(kPromptPrefix);
  std::vector<int32_t> state = tokenizer.encode(render(request.state));
  // The schema's spans are first relative to its own start, and shifted once the state's length is settled.
  PieceWriter schema(tokenizer);
  schema.add(kSchemaHeader);
  Encoding encoding;
  for (size_t k = 0; k < request.questions.size(); ++k) {
    const Question& question = request.questions[k];
    schema.add(
        fmt::format("\nFIELD {}\nID: {}\nTYPE: {}\nINSTRUCTION: ", k + 1, question.id, type_name(question.type)));
    EncodedQuestion encoded;
    encoded.type = question.type;
    encoded.span = schema.add(question.instructions);
    schema.add("\nALLOWED OPTIONS:\n");
    for (size_t j = 0; j < question.options.size(); ++j) {
      schema.add(fmt::format("OPTION {}: ", j + 1));
      encoded.options.push_back(schema.add(render_option(question.options[j])));
      schema.add("\n");
    }
    schema.add("END FIELD\n");
    encoding.questions.push_back(std::move(encoded));
  }
  const std::vector<int32_t> suffix = tokenizer.encode(kPromptSuffix);

  const auto fixed = static_cast<int32_t>(prefix.size() + schema.ids().size() + suffix.size());
  const auto state_tokens = static_cast<int32_t>(state.size());
  if (fixed > max_length) throw BudgetExceeded("schema_too_long", fixed, state_tokens, max_length);
  int32_t kept = state_tokens;
  if (static_cast<int64_t>(fixed) + state_tokens > max_length) {
    if (request.truncation != Truncation::state_head)
      throw BudgetExceeded("state_too_long", fixed, state_tokens, max_length);
    kept = max_length - fixed;  // the reference's rule: the head of the state
  }
  state.resize(static_cast<size_t>(kept));

  const auto offset = static_cast<int32_t>(prefix.size()) + kept;
  for (size_t k = 0; k < encoding.questions.size(); ++k) {
    EncodedQuestion& encoded = encoding.questions[k];
    const Question& question = request.questions[k];
    shift(encoded.span, offset);
    // An empty span's mean is undefined: refused, as the reference refuses it.
    if (encoded.span.size() == 0)
      refuse("empty_span", "questions." + question.id + ".instructions", "the instructions have no tokens");
    for (size_t j = 0; j < encoded.options.size(); ++j) {
      shift(encoded.options[j], offset);
      if (encoded.options[j].size() == 0)
        refuse("empty_span", "questions." + question.id + ".criteria." + question.options[j].id,
               "the option's text has no tokens");
    }
  }
  encoding.ids = prefix;
  encoding.ids.insert(encoding.ids.end(), state.begin(), state.end());
  encoding.ids.insert(encoding.ids.end(), schema.ids().begin(), schema.ids().end());
  encoding.ids.insert(encoding.ids.end(), suffix.begin(), suffix.end());
  encoding.fixed_tokens = fixed;
  encoding.state_tokens = state_tokens;
  encoding.state_tokens_dropped = state_tokens - kept;
  return encoding;
}

}  // namespace duet::decision
