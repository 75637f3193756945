#include "engine/sequence.h"

#include <tuple>

#include "base/error.h"
#include "grammar/token_mask.h"

namespace duet::engine {

Sequence::Sequence(uint64_t id, Request request, std::shared_ptr<RequestHandle> handle,
                   const tokenizer::Tokenizer* tokenizer)
    : id_(id),
      request_(std::move(request)),
      handle_(std::move(handle)),
      tokenizer_(tokenizer),
      stop_matcher_(request_.sampling.stop) {
  if (tokenizer_ != nullptr) decoder_.emplace(*tokenizer_, request_.sampling.skip_special_tokens);
  if (request_.grammar) {
    matcher_ = std::make_unique<grammar::Matcher>(request_.grammar);
    grammar_started_ = !request_.grammar_after.has_value();
  }
}

std::string Sequence::text_for(int32_t id) {
  // The model's vocabulary may be padded past the tokenizer's; such an id has no text.
  if (!decoder_ || id >= tokenizer_->vocab_size()) return {};
  try {
    return decoder_->push(id);
  } catch (const Error&) {
    return {};  // an id inside the range the tokenizer has no text for: it still counts as a token
  }
}

size_t Sequence::mask_words() const {
  if (matcher_ == nullptr) fail("engine: sequence {} has no grammar to mask its tokens", id_);
  return static_cast<size_t>(matcher_->compiled().vocabulary().words());
}

void Sequence::write_mask(std::span<uint32_t> words, std::span<const int32_t> end_ids) {
  if (!constrained()) fail("engine: sequence {} has no grammar holding for its next token", id_);
  if (words.size() != mask_words()) fail("engine: a mask of {} words for a grammar of {}", words.size(), mask_words());
  matcher_->fill_mask(words);
  if (matcher_->can_end())
    for (int32_t id : end_ids)
      if (id >= 0 && static_cast<size_t>(id) / 32 < words.size()) grammar::set_bit(words, id);
}

std::optional<FinishReason> Sequence::accept(const SampledToken& token, bool is_stop_token) {
  bool document_complete = false;
  if (matcher_ != nullptr && !is_stop_token) {
    if (!grammar_started_) {
      grammar_started_ = token.id == request_.grammar_after;
    } else if (!matcher_->accept_token(token.id)) {
      generated_.push_back(token.id);
      return FinishReason::error;
    } else {
      document_complete = matcher_->must_end();
    }
  }
  generated_.push_back(token.id);
  if (!first_token_at_) first_token_at_ = Clock::now();
  if (is_stop_token) {
    matched_stop_token_ = token.id;
    return FinishReason::stop;
  }
  TokenEvent event{.id = token.id, .text = {}, .logprob = token.logprob, .top_logprobs = token.top_logprobs};
  StopMatcher::Result text = stop_matcher_.push(text_for(token.id));
  event.text = std::move(text.released);
  handle_->push(std::move(event));
  if (text.matched) {
    matched_stop_string_ = std::move(text.matched);
    return FinishReason::stop;
  }
  if (document_complete) return FinishReason::stop;
  if (static_cast<int32_t>(generated_.size()) >= request_.sampling.max_tokens) return FinishReason::length;
  return std::nullopt;
}

void Sequence::set_drafts(std::span<const int32_t> drafts) {
  verify_tokens_.clear();
  if (drafts.empty() || generated_.empty()) return;
  verify_tokens_.push_back(generated_.back());
  verify_tokens_.insert(verify_tokens_.end(), drafts.begin(), drafts.end());
}

double Sequence::time_to_first_token_s() const {
  if (!first_token_at_) return 0;
  return std::chrono::duration<double>(*first_token_at_ - submitted_at_).count();
}

double Sequence::seconds_since_submitted() const {
  return std::chrono::duration<double>(Clock::now() - submitted_at_).count();
}

void Sequence::finish(FinishReason reason, std::string error, std::vector<float> decision_logits) {
  if (finished_) return;
  finished_ = true;
  FinishedEvent event;
  event.reason = reason;
  event.decision_logits = std::move(decision_logits);
  event.prompt_tokens = prompt_length();
  event.cached_tokens = cached_tokens_;
  event.completion_tokens = static_cast<int32_t>(generated_.size());
  event.error = std::move(error);
  event.time_to_first_token_s = time_to_first_token_s();
  if (decision_times_) std::tie(event.decision_prefill_s, event.decision_head_s) = *decision_times_;
  event.matched_stop_token = matched_stop_token_;
  event.matched_stop_string = matched_stop_string_;
  if (!matched_stop_string_) {
    // Bytes of an unfinished character, then whatever the stop matcher still held back.
    std::string rest = decoder_ ? decoder_->finish() : std::string();
    StopMatcher::Result tail = stop_matcher_.push(rest);
    event.text_tail = std::move(tail.released);
    if (tail.matched) {
      event.matched_stop_string = std::move(tail.matched);
      if (reason == FinishReason::length) event.reason = FinishReason::stop;
    } else {
      event.text_tail += stop_matcher_.flush();
    }
  }
  handle_->push(std::move(event));
}

}  // namespace duet::engine
