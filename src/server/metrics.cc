#include "server/metrics.h"

#include <fmt/format.h>
#include <unistd.h>

#include <fstream>

#include "grammar/grammar_cache.h"

namespace duet::server {
namespace {

// Resident set size of this process; 0 where /proc is not there.
int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size_pages = 0, resident_pages = 0;
  if (!(statm >> size_pages >> resident_pages)) return 0;
  return resident_pages * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

void metric(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

template <typename T>
void sample(std::string& out, std::string_view name, T value, std::string_view labels = {}) {
  if (labels.empty())
    out += fmt::format("{} {}\n", name, value);
  else
    out += fmt::format("{}{{{}}} {}\n", name, labels, value);
}

// Prometheus label values escape backslash, quote and newline.
std::string escape_label(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

}  // namespace

void ServerMetrics::count_response(std::string_view route, int status) {
  std::lock_guard lock(mutex_);
  ++responses_[{std::string(route), status}];
}

void ServerMetrics::record_finished(const engine::FinishedEvent& finished, double request_seconds) {
  std::lock_guard lock(mutex_);
  ++finish_reasons_[engine::to_string(finished.reason)];
  if (finished.completion_tokens > 0) {
    ttft_seconds_sum_ += finished.time_to_first_token_s;
    ++ttft_count_;
  }
  request_seconds_sum_ += request_seconds;
  ++request_count_;
}

void ServerMetrics::connection_opened() {
  std::lock_guard lock(mutex_);
  ++connections_open_;
  ++connections_total_;
}

void ServerMetrics::connection_closed() {
  std::lock_guard lock(mutex_);
  --connections_open_;
}

void ServerMetrics::connection_refused() {
  std::lock_guard lock(mutex_);
  ++connections_refused_;
}

std::string ServerMetrics::render(const engine::EngineStats& engine, const std::string& model_name) const {
  std::string out;
  std::string model = fmt::format("model=\"{}\"", escape_label(model_name));
  metric(out, "duet_requests_total", "counter", "Requests submitted to the engine.");
  sample(out, "duet_requests_total", engine.requests_total, model);
  metric(out, "duet_requests_finished_total", "counter", "Requests that finished (stop or length).");
  sample(out, "duet_requests_finished_total", engine.requests_finished, model);
  metric(out, "duet_requests_cancelled_total", "counter", "Requests cancelled (client gone or shutdown).");
  sample(out, "duet_requests_cancelled_total", engine.requests_cancelled, model);
  metric(out, "duet_requests_refused_total", "counter", "Requests refused because the queue was full.");
  sample(out, "duet_requests_refused_total", engine.requests_refused, model);
  metric(out, "duet_requests_failed_total", "counter", "Requests that ended in an engine error.");
  sample(out, "duet_requests_failed_total", engine.requests_failed, model);
  metric(out, "duet_prompt_tokens_total", "counter", "Prompt tokens prefilled.");
  sample(out, "duet_prompt_tokens_total", engine.prompt_tokens_total, model);
  metric(out, "duet_generated_tokens_total", "counter", "Tokens generated.");
  sample(out, "duet_generated_tokens_total", engine.generated_tokens_total, model);
  metric(out, "duet_engine_failed", "gauge",
         "1 once a device error stopped the engine (see /health); the server exits.");
  sample(out, "duet_engine_failed", engine.failure.empty() ? 0 : 1, model);
  metric(out, "duet_requests_running", "gauge", "Sequences holding a slot.");
  sample(out, "duet_requests_running", engine.running, model);
  metric(out, "duet_requests_waiting", "gauge", "Requests queued for a slot.");
  sample(out, "duet_requests_waiting", engine.waiting, model);
  metric(out, "duet_slots_total", "gauge", "Sequence slots in the state pool (--parallel).");
  sample(out, "duet_slots_total", engine.slots_total, model);
  metric(out, "duet_slots_free", "gauge", "Free sequence slots.");
  sample(out, "duet_slots_free", engine.slots_free, model);
  metric(out, "duet_kv_pages_total", "gauge", "KV cache pages (64 positions of one sequence, every attention layer).");
  sample(out, "duet_kv_pages_total", engine.kv_pages_total, model);
  metric(out, "duet_kv_pages_free", "gauge", "KV cache pages no sequence holds now.");
  sample(out, "duet_kv_pages_free", engine.kv_pages_free, model);
  metric(out, "duet_kv_pages_reserved", "gauge", "KV cache pages reserved for the whole length of running requests.");
  sample(out, "duet_kv_pages_reserved", engine.kv_pages_reserved, model);
  metric(out, "duet_prompt_cache_hits_total", "counter", "Requests admitted with a prefix from the prompt cache.");
  sample(out, "duet_prompt_cache_hits_total", engine.prompt_cache_hits, model);
  metric(out, "duet_prompt_cache_misses_total", "counter", "Requests the prompt cache had no prefix for.");
  sample(out, "duet_prompt_cache_misses_total", engine.prompt_cache_misses, model);
  metric(out, "duet_prompt_cache_evictions_total", "counter", "Prompt cache entries dropped for room.");
  sample(out, "duet_prompt_cache_evictions_total", engine.prompt_cache_evictions, model);
  metric(out, "duet_prompt_cache_tokens_total", "counter", "Prompt tokens resumed from the prompt cache.");
  sample(out, "duet_prompt_cache_tokens_total", engine.prompt_cache_tokens_total, model);
  metric(out, "duet_prompt_cache_bytes_held", "gauge", "Bytes the prompt cache's entries hold (snapshots, pages).");
  sample(out, "duet_prompt_cache_bytes_held", engine.prompt_cache_bytes_held, model);
  metric(out, "duet_prompt_cache_bytes", "gauge", "The prompt cache's budget (--prompt-cache-gib); 0: off.");
  sample(out, "duet_prompt_cache_bytes", engine.prompt_cache_bytes, model);
  metric(out, "duet_prompt_cache_host_hits_total", "counter",
         "Requests resumed from an entry brought back from the prompt cache's host tier (in the hits too).");
  sample(out, "duet_prompt_cache_host_hits_total", engine.prompt_cache_host_hits, model);
  metric(out, "duet_prompt_cache_host_evictions_total", "counter", "Host tier entries dropped for room.");
  sample(out, "duet_prompt_cache_host_evictions_total", engine.prompt_cache_host_evictions, model);
  metric(out, "duet_prompt_cache_host_bytes_held", "gauge", "Bytes the host tier's entries hold (snapshots, pages).");
  sample(out, "duet_prompt_cache_host_bytes_held", engine.prompt_cache_host_bytes_held, model);
  metric(out, "duet_prompt_cache_host_bytes", "gauge", "The host tier's budget (--prompt-cache-host-gib); 0: off.");
  sample(out, "duet_prompt_cache_host_bytes", engine.prompt_cache_host_bytes, model);
  metric(out, "duet_engine_steps_total", "counter", "Engine steps run.");
  sample(out, "duet_engine_steps_total", engine.steps_total, model);
  metric(out, "duet_engine_steps_ahead_total", "counter",
         "Engine steps launched while the step before ran, its tokens read on the device.");
  sample(out, "duet_engine_steps_ahead_total", engine.steps_ahead_total, model);
  metric(out, "duet_engine_step_seconds_total", "counter", "Time spent in engine steps.");
  sample(out, "duet_engine_step_seconds_total", engine.step_seconds_total, model);
  metric(out, "duet_engine_step_seconds_last", "gauge", "Duration of the latest engine step.");
  sample(out, "duet_engine_step_seconds_last", engine.step_seconds_last, model);
  metric(out, "duet_engine_time_to_first_token_seconds_total", "counter",
         "Time to first token summed over requests that produced a token.");
  sample(out, "duet_engine_time_to_first_token_seconds_total", engine.time_to_first_token_seconds_total, model);
  metric(out, "duet_weight_bytes", "gauge", "Bytes of model weights.");
  sample(out, "duet_weight_bytes", engine.weight_bytes, model);
  metric(out, "duet_state_pool_bytes", "gauge", "Bytes of the sequence state pool (KV pages, GDN state).");
  sample(out, "duet_state_pool_bytes", engine.state_pool_bytes, model);
  metric(out, "duet_workspace_bytes", "gauge", "Bytes of step workspace in the memory plan.");
  sample(out, "duet_workspace_bytes", engine.workspace_bytes, model);
  metric(out, "duet_memory_limit_bytes", "gauge", "The memory the plan had to fit in.");
  sample(out, "duet_memory_limit_bytes", engine.memory_limit_bytes, model);
  metric(out, "duet_process_resident_bytes", "gauge", "Resident memory of the server process.");
  sample(out, "duet_process_resident_bytes", resident_bytes());

  metric(out, "duet_vision_tower_images_total", "counter",
         "Images the vision tower encoded (not those inside a prompt prefix resumed from the prompt cache).");
  sample(out, "duet_vision_tower_images_total", engine.vision_images_total, model);
  metric(out, "duet_vision_tower_seconds_total", "counter", "Time the vision tower ran.");
  sample(out, "duet_vision_tower_seconds_total", engine.vision_seconds_total, model);
  metric(out, "duet_vision_tower_stages_total", "counter",
         "Vision tower stages run (the embedding, each block, the merger: --vision-step-ms spreads them over steps).");
  sample(out, "duet_vision_tower_stages_total", engine.vision_stages_total, model);
  metric(out, "duet_vision_tower_steps_total", "counter", "Engine steps in which the vision tower ran.");
  sample(out, "duet_vision_tower_steps_total", engine.vision_steps_total, model);

  metric(out, "duet_grammar_requests_total", "counter", "Requests with a structured output (a grammar).");
  sample(out, "duet_grammar_requests_total", constrained_requests.load(), model);
  metric(out, "duet_grammar_masks_total", "counter", "Token masks made for structured outputs.");
  sample(out, "duet_grammar_masks_total", engine.grammar_masks_total, model);
  metric(out, "duet_grammar_mask_seconds_total", "counter", "Time spent making token masks.");
  sample(out, "duet_grammar_mask_seconds_total", engine.grammar_mask_seconds_total, model);
  metric(out, "duet_verify_pieces_total", "counter",
         "Decode steps of a sequence that verified drafted tokens (--draft).");
  sample(out, "duet_verify_pieces_total", engine.verify_pieces_total, model);
  metric(out, "duet_drafts_verified_total", "counter",
         "Drafted tokens compared with their row's draw, by draft position.");
  for (size_t k = 0; k < engine.drafts_verified.size(); ++k)
    sample(out, "duet_drafts_verified_total", engine.drafts_verified[k],
           fmt::format("{},position=\"{}\"", model, k + 1));
  metric(out, "duet_drafts_accepted_total", "counter",
         "Drafted tokens accepted (equal to the draw), by draft position.");
  for (size_t k = 0; k < engine.drafts_accepted.size(); ++k)
    sample(out, "duet_drafts_accepted_total", engine.drafts_accepted[k],
           fmt::format("{},position=\"{}\"", model, k + 1));
  metric(out, "duet_draft_choices_total", "counter",
         "Draftings by the tokens drafted for each sequence's next step (chosen per step from measured costs).");
  for (size_t k = 0; k < engine.draft_choices.size(); ++k)
    sample(out, "duet_draft_choices_total", engine.draft_choices[k], fmt::format("{},tokens=\"{}\"", model, k));
  if (grammar_cache != nullptr) {
    metric(out, "duet_grammar_cache_hits_total", "counter", "Structured outputs whose grammar was already compiled.");
    sample(out, "duet_grammar_cache_hits_total", static_cast<int64_t>(grammar_cache->hits()), model);
    metric(out, "duet_grammar_cache_misses_total", "counter", "Grammars compiled.");
    sample(out, "duet_grammar_cache_misses_total", static_cast<int64_t>(grammar_cache->misses()), model);
  }

  std::lock_guard lock(mutex_);
  metric(out, "duet_http_responses_total", "counter", "HTTP responses by route and status.");
  for (const auto& [key, count] : responses_)
    sample(out, "duet_http_responses_total", count, fmt::format("route=\"{}\",status=\"{}\"", key.first, key.second));
  metric(out, "duet_http_connections_open", "gauge", "Client connections open now.");
  sample(out, "duet_http_connections_open", connections_open_);
  metric(out, "duet_http_connections_total", "counter", "Client connections accepted (refused ones included).");
  sample(out, "duet_http_connections_total", connections_total_);
  metric(out, "duet_http_connections_refused_total", "counter", "Connections answered 503 over --max-connections.");
  sample(out, "duet_http_connections_refused_total", connections_refused_);
  metric(out, "duet_request_finish_total", "counter", "Generation requests by finish reason.");
  for (const auto& [reason, count] : finish_reasons_)
    sample(out, "duet_request_finish_total", count, fmt::format("reason=\"{}\"", reason));
  metric(out, "duet_time_to_first_token_seconds", "summary", "Time from submit to the first token.");
  sample(out, "duet_time_to_first_token_seconds_sum", ttft_seconds_sum_);
  sample(out, "duet_time_to_first_token_seconds_count", ttft_count_);
  metric(out, "duet_request_seconds", "summary", "Time from submit to the last event.");
  sample(out, "duet_request_seconds_sum", request_seconds_sum_);
  sample(out, "duet_request_seconds_count", request_count_);
  return out;
}

}  // namespace duet::server
