#include "server/generation.h"

#include <fmt/format.h>

#include "server/errors.h"
#include "server/sse.h"

namespace duet::server {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class CollectedBody final : public GenerationBody {
 public:
  CollectedBody(ServerContext& context, Choices choices, AnswerBuilder build, std::string failed)
      : GenerationBody(context, choices),
        build_(std::move(build)),
        failed_(std::move(failed)),
        generations_(choices.size()) {}

  bool streams() const override { return false; }

  HttpResponse answer() override {
    HttpResponse res = built();
    res.headers.insert(res.headers.end(), headers.begin(), headers.end());
    // A decision says where its time went, in the standard Server-Timing header (milliseconds), as its log line does.
    if (const auto used = usage(); used && used->decision_prefill_s && used->decision_head_s)
      res.headers.emplace_back("Server-Timing",
                               fmt::format("prefill;dur={:.1f}, head;dur={:.1f}", *used->decision_prefill_s * 1e3,
                                           *used->decision_head_s * 1e3));
    return res;
  }

 private:
  HttpResponse built() {
    for (const auto& generation : generations_)
      if (generation.finished.reason == engine::FinishReason::error)
        return error_response(ApiError(500, failed_ + ": " + generation.finished.error, "", "engine_error"));
    return response_of([this] { return build_(generations_); }, "building an answer");
  }

  std::string on_tokens(size_t choice, std::vector<engine::TokenEvent>& tokens) override {
    CollectedGeneration& generation = generations_[choice];
    for (auto& token : tokens) {
      generation.text += token.text;
      generation.tokens.push_back(std::move(token));
    }
    return {};
  }

  std::string on_finished(size_t choice, engine::FinishedEvent& finished) override {
    generations_[choice].text += finished.text_tail;
    generations_[choice].finished = std::move(finished);
    return {};
  }

  AnswerBuilder build_;
  std::string failed_;  // the 500's message starts with it
  std::vector<CollectedGeneration> generations_;
};

class StreamedBody final : public GenerationBody {
 public:
  StreamedBody(ServerContext& context, Choices choices, std::unique_ptr<StreamFormatter> formatter)
      : GenerationBody(context, std::move(choices)), formatter_(std::move(formatter)) {}

  bool streams() const override { return true; }
  std::string begin() override { return formatter_->start(); }

 private:
  std::string on_tokens(size_t choice, std::vector<engine::TokenEvent>& tokens) override {
    return formatter_->tokens(choice, tokens);
  }
  std::string on_finished(size_t choice, engine::FinishedEvent& finished) override {
    return formatter_->finish(choice, finished);
  }
  std::string on_done(const GenerationUsage& usage) override { return formatter_->end(usage); }

  std::unique_ptr<StreamFormatter> formatter_;
};

}  // namespace

namespace {
// What `submit` returns, with the engine's refusals as HTTP errors: QueueFull 429 with Retry-After, RequestInvalid 400
// with its code (param `prompt_param`), EngineFailed 503 (a device error stopped the engine; the server is exiting).
template <typename Submit>
auto refusals_mapped(const std::string& prompt_param, Submit&& submit) {
  try {
    return submit();
  } catch (const engine::QueueFull& full) {
    ApiError error(429, std::string("the server is busy: ") + full.what() + "; retry later", "", "rate_limit_exceeded");
    error.retry_after_s = 1;
    throw error;
  } catch (const engine::RequestInvalid& invalid) {
    throw ApiError(400, invalid.what(), prompt_param, invalid.code());
  } catch (const engine::EngineFailed& failed) {
    throw ApiError(503, failed.what(), "", "engine_failed");
  }
}
}  // namespace

std::shared_ptr<engine::RequestHandle> submit_request(ServerContext& context, engine::Request request,
                                                      const std::string& prompt_param) {
  return refusals_mapped(prompt_param, [&] { return context.backend.submit(std::move(request)); });
}

Choices submit_choices(ServerContext& context, const engine::Request& request, int32_t n,
                       const std::string& prompt_param) {
  if (n == 1) return {submit_request(context, request, prompt_param)};
  std::vector<engine::Request> requests;
  for (int32_t i = 0; i < n; ++i) {
    requests.push_back(request);
    requests.back().sampling.seed += static_cast<uint64_t>(i);
  }
  return refusals_mapped(prompt_param, [&] { return context.backend.submit_choices(std::move(requests)); });
}

std::vector<std::shared_ptr<engine::RequestHandle>> GenerationBackend::submit_choices(
    std::vector<engine::Request> requests) {
  std::vector<std::shared_ptr<engine::RequestHandle>> handles;
  try {
    for (auto& request : requests) handles.push_back(submit(std::move(request)));
  } catch (...) {
    for (auto& handle : handles) handle->cancel();
    throw;
  }
  return handles;
}

GenerationBody::GenerationBody(ServerContext& context, Choices choices)
    : context_(context), choices_(std::move(choices)), choice_done_(choices_.size(), false) {}

void GenerationBody::cancel() {
  for (auto& handle : choices_) handle->cancel();
}

void GenerationBody::set_listener(const std::function<void()>& listener) {
  for (auto& handle : choices_) handle->set_listener(listener);
}

std::optional<GenerationUsage> GenerationBody::usage() const {
  if (!done()) return std::nullopt;
  return usage_;
}

bool GenerationBody::take_ready(std::string& out) {
  bool took = false;
  for (size_t choice = 0; choice < choices_.size(); ++choice) {
    std::vector<engine::Event> events;
    while (auto event = choices_[choice]->try_next()) events.push_back(std::move(*event));
    if (events.empty()) continue;
    took = true;
    out += take_choice(choice, events);
  }
  return took;
}

std::string GenerationBody::take_choice(size_t choice, std::vector<engine::Event>& events) {
  std::string out;
  std::vector<engine::TokenEvent> tokens;  // every token that is ready goes out in one piece
  for (auto& event : events) {
    if (choice_done_[choice]) break;  // nothing follows the FinishedEvent
    if (auto* token = std::get_if<engine::TokenEvent>(&event)) {
      tokens.push_back(std::move(*token));
      continue;
    }
    if (!tokens.empty()) out += on_tokens(choice, tokens);
    tokens.clear();
    auto& finished = std::get<engine::FinishedEvent>(event);
    context_.metrics.record_finished(finished, seconds_since(start_));
    if (choice == 0) {
      usage_.prompt_tokens = finished.prompt_tokens;
      usage_.cached_tokens = finished.cached_tokens;
      usage_.time_to_first_token_s = finished.time_to_first_token_s;
      usage_.decision_prefill_s = finished.decision_prefill_s;
      usage_.decision_head_s = finished.decision_head_s;
    }
    usage_.completion_tokens += finished.completion_tokens;
    out += on_finished(choice, finished);
    choice_done_[choice] = true;
    if (++finished_ == choices_.size()) out += on_done(usage_);
  }
  if (!tokens.empty()) out += on_tokens(choice, tokens);
  return out;
}

HttpResponse collect_generation(ServerContext& context, Choices choices, AnswerBuilder build, std::string failed) {
  HttpResponse res;
  res.generation = std::make_shared<CollectedBody>(context, std::move(choices), std::move(build), std::move(failed));
  return res;
}

HttpResponse stream_generation(ServerContext& context, Choices choices, std::unique_ptr<StreamFormatter> formatter) {
  HttpResponse res;
  res.content_type = "text/event-stream";
  res.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
  res.generation = std::make_shared<StreamedBody>(context, std::move(choices), std::move(formatter));
  return res;
}

HttpResponse generation_response(ServerContext& context, Choices choices, bool stream,
                                 const std::function<std::unique_ptr<StreamFormatter>()>& formatter,
                                 AnswerBuilder build, const ClientTags& client, HttpHeaders headers) {
  HttpResponse res = stream ? stream_generation(context, std::move(choices), formatter())
                            : collect_generation(context, std::move(choices), std::move(build));
  res.generation->client = client;
  res.headers.insert(res.headers.end(), headers.begin(), headers.end());
  res.generation->headers = std::move(headers);
  return res;
}

nlohmann::json usage_json(int32_t prompt_tokens, int32_t completion_tokens, int32_t cached_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

nlohmann::json whole_answer_json(const AnswerHeader& header, nlohmann::json choices, bool return_token_ids,
                                 std::span<const CollectedGeneration> generations) {
  int32_t completion_tokens = 0;
  for (size_t i = 0; i < generations.size(); ++i) {
    completion_tokens += generations[i].finished.completion_tokens;
    if (!return_token_ids) continue;
    auto ids = nlohmann::json::array();
    for (const auto& token : generations[i].tokens) ids.push_back(token.id);
    choices[i]["token_ids"] = std::move(ids);
  }
  // The choices share one prompt: it counts once.
  return {{"id", header.id},
          {"object", header.object},
          {"created", header.created},
          {"model", header.model},
          {"choices", std::move(choices)},
          {"usage", usage_json(generations.front().finished.prompt_tokens, completion_tokens,
                               generations.front().finished.cached_tokens)}};
}

nlohmann::json chunk_header(const std::string& id, std::string_view object, int64_t created, const std::string& model,
                            bool include_usage) {
  nlohmann::json json = {{"id", id}, {"object", object}, {"created", created}, {"model", model}};
  if (include_usage) json["usage"] = nullptr;
  return json;
}

std::string usage_chunk(nlohmann::json header, const GenerationUsage& usage) {
  header["choices"] = nlohmann::json::array();
  header["usage"] = usage_json(usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens);
  return sse_event(header);
}

std::string token_text(const tokenizer::Tokenizer& tokenizer, int32_t id) {
  try {
    return tokenizer.decode(std::span<const int32_t>(&id, 1), false);
  } catch (const std::exception&) {
    return {};  // an id the tokenizer lacks (a padded vocabulary row): no text
  }
}

nlohmann::json token_bytes(const tokenizer::Tokenizer& tokenizer, int32_t id) {
  // The token's own bytes, not its text's: a token holding part of a UTF-8 character decodes to U+FFFD, while
  // its bytes let a client join the pieces of a character split across tokens.
  const std::string* raw = tokenizer.token_bytes(id);
  const std::string text = raw ? *raw : token_text(tokenizer, id);
  auto bytes = nlohmann::json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return bytes;
}

}  // namespace duet::server
