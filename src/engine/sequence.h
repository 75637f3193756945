#pragma once
// One admitted or waiting request as the engine tracks it: its prompt, how far the prompt has been prefilled,
// the tokens generated so far, its state slot, and the text pipeline (stream decoder, stop strings) that turns
// tokens into events.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/image_cache_key.h"
#include "engine/image_prompt.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace duet::engine {

using Clock = std::chrono::steady_clock;

class Sequence {
 public:
  Sequence(uint64_t id, Request request, std::shared_ptr<RequestHandle> handle, const tokenizer::Tokenizer* tokenizer);

  uint64_t id() const { return id_; }
  // A later choice of an n-choice request: the id of its first choice, whose prefilled state it is forked from
  // when it is admitted while that one still prefills (Engine::submit_choices); nullopt for every other sequence.
  std::optional<uint64_t> fork_of() const { return fork_of_; }
  void set_fork_of(uint64_t first_choice) { fork_of_ = first_choice; }
  const Request& request() const { return request_; }
  const SamplingParams& sampling() const { return request_.sampling; }
  bool decides() const { return request_.kind == RequestKind::decide; }
  // Tokens it may still add after its prompt: none for a decision.
  int32_t max_new_tokens() const { return decides() ? 0 : request_.sampling.max_tokens; }
  // A decision's sink (null for generate requests).
  DecisionSink* decision() const { return request_.decision.get(); }
  RequestHandle& handle() { return *handle_; }
  // The consumer asked to stop, or dropped its handle (the engine holds the only reference: nobody reads).
  bool abandoned() const { return handle_->cancelled() || handle_.use_count() == 1; }

  int32_t prompt_length() const { return static_cast<int32_t>(request_.prompt.size()); }
  int32_t prefilled() const { return prefilled_; }
  bool prefill_done() const { return prefilled_ == prompt_length(); }
  const std::vector<int32_t>& generated() const { return generated_; }
  // Absolute position of the next token to sample (its seeded draw is keyed by it).
  int64_t next_position() const { return prompt_length() + static_cast<int64_t>(generated_.size()); }

  // A prompt with images (Request::images): its positions, rope delta and, once the tower ran, its image rows.
  bool has_images() const { return images_.has_value(); }
  ImagePrompt& images() { return *images_; }
  const ImagePrompt& images() const { return *images_; }
  void set_images(ImagePrompt images) { images_ = std::move(images); }
  // A prompt that cannot prefill yet: its images' rows are not made (engine/tower_runner.h).
  bool waits_for_tower() const { return images_ && !images_->has_rows() && !prefill_done(); }
  // Its images as the prompt cache tells them apart (image_cache_key.h), set at submit when the engine has a cache.
  std::span<const ImageCacheKey> image_cache_keys() const { return image_cache_keys_; }
  void set_image_cache_keys(std::vector<ImageCacheKey> keys) { image_cache_keys_ = std::move(keys); }
  // What every row after the prompt adds to its rotary position (0 for text).
  int32_t rope_delta() const { return images_ ? images_->rope_delta() : 0; }

  std::optional<int32_t> slot() const { return slot_; }
  void set_slot(std::optional<int32_t> slot) { slot_ = slot; }
  void advance_prefill(int32_t tokens) { prefilled_ += tokens; }
  // Starts from a prompt cache hit: its first `tokens` positions are already in its state.
  void resume_at(int32_t tokens) { prefilled_ = cached_tokens_ = tokens; }
  int32_t cached_tokens() const { return cached_tokens_; }
  // Block ends where the prompt cache keeps this prompt's state (ascending): a step's snapshot inside the step takes it
  // there (engine/step_snapshots.h), or, on a backend without them, its prefill is cut there.
  const std::vector<int32_t>& cache_points() const { return cache_points_; }
  void set_cache_points(std::vector<int32_t> points) { cache_points_ = std::move(points); }

  // A structured output (Request::grammar) whose grammar holds for the next token.
  bool constrained() const { return matcher_ != nullptr && grammar_started_; }
  // The words of its masks: its grammar's vocabulary's (grammar/token_mask.h).
  size_t mask_words() const;
  // Writes the next token's mask into `words` (mask_words() of them, every one set): the grammar's tokens, and
  // `end_ids` (its stop tokens) when the document may end here. Only while constrained(); where the words are is the
  // caller's (the backend's upload memory, engine/step_masks.h).
  void write_mask(std::span<uint32_t> words, std::span<const int32_t> end_ids);

  // Records a sampled token and sends what it produced; returns the reason if the sequence ends with it. A stop
  // token (eos unless ignore_eos, or one of stop_token_ids) is counted but sends no TokenEvent. A constrained
  // sequence ends with `stop` once its document is complete, and with `error` if a token does not fit its grammar
  // (never, when the token was drawn under its mask).
  std::optional<FinishReason> accept(const SampledToken& token, bool is_stop_token);
  // Sends the FinishedEvent (once; later calls do nothing), with a decision's logits when it has them.
  void finish(FinishReason reason, std::string error = {}, std::vector<float> decision_logits = {});
  bool finished() const { return finished_; }

  // Speculative decoding (engine/draft_verify.h). Whether it may draft: a generate request that did not opt out and
  // has no grammar (a structured output's masks follow its grammar token by token).
  bool speculative() const { return request_.sampling.speculative && !decides() && !request_.grammar; }
  // What its next decode step runs: its last generated token, then the drafts; empty when nothing is drafted.
  std::span<const int32_t> verify_tokens() const { return verify_tokens_; }
  std::span<const int32_t> drafts() const {
    return verify_tokens_.empty() ? std::span<const int32_t>() : std::span(verify_tokens_).subspan(1);
  }
  void set_drafts(std::span<const int32_t> drafts);  // none: a plain decode step next
  // `--draft mtp`: the positions whose MTP rows have run (engine/mtp_drafter.h): they go on from here.
  int64_t mtp_positions() const { return mtp_positions_; }
  void set_mtp_positions(int64_t positions) { mtp_positions_ = positions; }

  double time_to_first_token_s() const;  // 0 before the first token
  double seconds_since_submitted() const;
  // A decision's two phases, reported with its FinishedEvent (decision_prefill_s, decision_head_s).
  void set_decision_times(double prefill_s, double head_s) { decision_times_ = {prefill_s, head_s}; }

 private:
  std::string text_for(int32_t id);

  uint64_t id_;
  Request request_;
  std::shared_ptr<RequestHandle> handle_;
  const tokenizer::Tokenizer* tokenizer_;
  std::optional<tokenizer::StreamDecoder> decoder_;
  StopMatcher stop_matcher_;
  std::optional<int32_t> slot_;
  std::optional<uint64_t> fork_of_;
  std::optional<ImagePrompt> images_;
  std::vector<ImageCacheKey> image_cache_keys_;
  int32_t prefilled_ = 0;
  int32_t cached_tokens_ = 0;
  std::vector<int32_t> cache_points_;
  std::vector<int32_t> generated_;
  std::vector<int32_t> verify_tokens_;
  int64_t mtp_positions_ = 0;
  std::optional<int32_t> matched_stop_token_;
  std::optional<std::string> matched_stop_string_;
  Clock::time_point submitted_at_ = Clock::now();
  std::optional<Clock::time_point> first_token_at_;
  std::optional<std::pair<double, double>> decision_times_;
  bool finished_ = false;
  std::unique_ptr<grammar::Matcher> matcher_;  // structured outputs only
  bool grammar_started_ = false;               // false until grammar_after was generated
};

}  // namespace duet::engine
