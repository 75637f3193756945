#include "engine/request_validation.h"

#include <fmt/format.h>

#include <cmath>

#include "engine/image_prompt.h"

namespace duet::engine {

namespace {
[[noreturn]] void refuse(std::string code, std::string message) {
  throw RequestInvalid(std::move(message), std::move(code));
}

void check_sampling(const SamplingParams& s, const RequestLimits& limits) {
  const auto bad = [](std::string message) { refuse("invalid_sampling", std::move(message)); };
  if (!(s.temperature >= 0) || !std::isfinite(s.temperature))
    bad(fmt::format("temperature {} is not >= 0", s.temperature));
  if (s.top_k < 0) bad(fmt::format("top_k {} is negative (0 turns it off)", s.top_k));
  if (!(s.top_p > 0 && s.top_p <= 1)) bad(fmt::format("top_p {} is not in (0, 1]", s.top_p));
  if (!(s.min_p >= 0 && s.min_p <= 1)) bad(fmt::format("min_p {} is not in [0, 1]", s.min_p));
  if (!(s.repetition_penalty > 0) || !std::isfinite(s.repetition_penalty)) {
    bad(fmt::format("repetition_penalty {} is not > 0", s.repetition_penalty));
  }
  if (!std::isfinite(s.presence_penalty)) bad("presence_penalty is not a finite number");
  if (!std::isfinite(s.frequency_penalty)) bad("frequency_penalty is not a finite number");
  if (s.max_tokens < 1) bad(fmt::format("max_tokens {} is not >= 1", s.max_tokens));
  for (const auto& [id, bias] : s.logit_bias) {
    if (id < 0 || id >= limits.vocab_size)
      bad(fmt::format("logit_bias: {} is not a token id (the vocabulary has {})", id, limits.vocab_size));
    if (!std::isfinite(bias)) bad(fmt::format("logit_bias of {} is not a finite number", id));
  }
  if (s.top_logprobs < -1) bad(fmt::format("top_logprobs {} is not >= 0 (or -1 for none)", s.top_logprobs));
  if (s.top_logprobs > limits.vocab_size) {
    bad(fmt::format("top_logprobs {} exceeds the vocabulary ({})", s.top_logprobs, limits.vocab_size));
  }
  if (!s.stop.empty() && !limits.has_tokenizer) bad("stop strings need a model with a tokenizer");
}
}  // namespace

void validate_request(const Request& request, const RequestLimits& limits) {
  if (request.prompt.empty()) refuse("invalid_prompt", "the prompt is empty");
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    const int32_t id = request.prompt[i];
    if (id < 0 || id >= limits.vocab_size) {
      refuse("invalid_prompt",
             fmt::format("prompt token {} (at index {}) is outside the vocabulary [0, {})", id, i, limits.vocab_size));
    }
  }
  // A decision generates nothing: it needs its prompt's positions only, and its sampling numbers are never read.
  const bool decide = request.kind == RequestKind::decide;
  if (decide && request.decision == nullptr) refuse("invalid_decision", "a decide request needs a decision sink");
  if (request.adapter == AdapterUse::clef && !limits.has_adapter)
    refuse("invalid_adapter", "the request asks for the runtime adapter, but the model was loaded without --clef");
  if (!decide) check_sampling(request.sampling, limits);
  check_prompt_images(request, limits);
  const int32_t new_tokens = decide ? 0 : request.sampling.max_tokens;
  const int64_t needed = static_cast<int64_t>(request.prompt.size()) + new_tokens;
  if (needed > limits.context) {
    refuse("context_length_exceeded",
           fmt::format("this model's context is {} tokens; the request needs {} ({} in the prompt + {} max_tokens)",
                       limits.context, needed, request.prompt.size(), new_tokens));
  }
  // Admission reserves a request's whole length in KV pages; one that could never get them would wait forever.
  const int64_t pages = (needed + limits.kv_page_positions - 1) / limits.kv_page_positions;
  if (limits.kv_pages > 0 && pages > limits.kv_pages) {
    refuse("context_length_exceeded",
           fmt::format("the KV cache holds {} tokens ({} pages of {}); the request needs {} pages for {} tokens ({} "
                       "in the prompt + {} max_tokens)",
                       limits.kv_pages * limits.kv_page_positions, limits.kv_pages, limits.kv_page_positions, pages,
                       needed, request.prompt.size(), new_tokens));
  }
}

}  // namespace duet::engine
