#include "server/generation.h"

#include <fmt/format.h>

#include <random>

#include "server/errors.h"
#include "server/sse.h"

namespace duet::server {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class CollectedBody final : public GenerationBody {
 public:
  CollectedBody(ServerContext& context, std::shared_ptr<engine::RequestHandle> handle, AnswerBuilder build,
                std::string failed)
      : GenerationBody(context, std::move(handle)), build_(std::move(build)), failed_(std::move(failed)) {}

  bool streams() const override { return false; }

  HttpResponse answer() override {
    const engine::FinishedEvent& finished = generation_.finished;
    if (finished.reason == engine::FinishReason::error)
      return error_response(ApiError(500, failed_ + ": " + finished.error, "", "engine_error"));
    return response_of([this] { return build_(generation_); }, "building an answer");
  }

 private:
  std::string on_tokens(std::vector<engine::TokenEvent>& tokens) override {
    for (auto& token : tokens) {
      generation_.text += token.text;
      generation_.tokens.push_back(std::move(token));
    }
    return {};
  }

  std::string on_finished(engine::FinishedEvent& finished) override {
    generation_.text += finished.text_tail;
    generation_.finished = std::move(finished);
    return {};
  }

  AnswerBuilder build_;
  std::string failed_;  // the 500's message starts with it
  CollectedGeneration generation_;
};

class StreamedBody final : public GenerationBody {
 public:
  StreamedBody(ServerContext& context, std::shared_ptr<engine::RequestHandle> handle,
               std::unique_ptr<StreamFormatter> formatter)
      : GenerationBody(context, std::move(handle)), formatter_(std::move(formatter)) {}

  bool streams() const override { return true; }
  std::string begin() override { return formatter_->start(); }

 private:
  std::string on_tokens(std::vector<engine::TokenEvent>& tokens) override { return formatter_->tokens(tokens); }
  std::string on_finished(engine::FinishedEvent& finished) override {
    return formatter_->finish(finished) + formatter_->end();
  }

  std::unique_ptr<StreamFormatter> formatter_;
};

}  // namespace

std::shared_ptr<engine::RequestHandle> submit_request(ServerContext& context, engine::Request request,
                                                      const std::string& prompt_param) {
  try {
    return context.backend.submit(std::move(request));
  } catch (const engine::QueueFull& full) {
    ApiError error(429, std::string("the server is busy: ") + full.what() + "; retry later", "", "rate_limit_exceeded");
    error.retry_after_s = 1;
    throw error;
  } catch (const engine::RequestInvalid& invalid) {
    throw ApiError(400, invalid.what(), prompt_param, invalid.code());
  }
}

GenerationBody::GenerationBody(ServerContext& context, std::shared_ptr<engine::RequestHandle> handle)
    : context_(context), handle_(std::move(handle)) {}

std::string GenerationBody::take(std::vector<engine::Event>& events) {
  std::string out;
  std::vector<engine::TokenEvent> tokens;  // every token that is ready goes out in one piece
  for (auto& event : events) {
    if (done_) break;  // nothing follows the FinishedEvent
    if (auto* token = std::get_if<engine::TokenEvent>(&event)) {
      tokens.push_back(std::move(*token));
      continue;
    }
    if (!tokens.empty()) out += on_tokens(tokens);
    tokens.clear();
    auto& finished = std::get<engine::FinishedEvent>(event);
    context_.metrics.record_finished(finished, seconds_since(start_));
    usage_ = Usage{finished.prompt_tokens, finished.completion_tokens, finished.time_to_first_token_s};
    out += on_finished(finished);
    done_ = true;
  }
  if (!tokens.empty()) out += on_tokens(tokens);
  return out;
}

HttpResponse collect_generation(ServerContext& context, std::shared_ptr<engine::RequestHandle> handle,
                                AnswerBuilder build, std::string failed) {
  HttpResponse res;
  res.generation = std::make_shared<CollectedBody>(context, std::move(handle), std::move(build), std::move(failed));
  return res;
}

HttpResponse stream_generation(ServerContext& context, std::shared_ptr<engine::RequestHandle> handle,
                               std::unique_ptr<StreamFormatter> formatter) {
  HttpResponse res;
  res.content_type = "text/event-stream";
  res.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
  res.generation = std::make_shared<StreamedBody>(context, std::move(handle), std::move(formatter));
  return res;
}

HttpResponse generation_response(ServerContext& context, std::shared_ptr<engine::RequestHandle> handle, bool stream,
                                 const std::function<std::unique_ptr<StreamFormatter>()>& formatter,
                                 AnswerBuilder build, const ClientTags& client) {
  HttpResponse res = stream ? stream_generation(context, std::move(handle), formatter())
                            : collect_generation(context, std::move(handle), std::move(build));
  res.generation->client = client;
  return res;
}

std::string random_id(std::string_view prefix) {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  return fmt::format("{}{:016x}{:08x}", prefix, generator(), static_cast<uint32_t>(generator()));
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

nlohmann::json usage_json(int32_t prompt_tokens, int32_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

nlohmann::json whole_answer_json(const AnswerHeader& header, nlohmann::json choice, bool return_token_ids,
                                 const CollectedGeneration& generation) {
  if (return_token_ids) {
    auto ids = nlohmann::json::array();
    for (const auto& token : generation.tokens) ids.push_back(token.id);
    choice["token_ids"] = std::move(ids);
  }
  return {{"id", header.id},
          {"object", header.object},
          {"created", header.created},
          {"model", header.model},
          {"choices", nlohmann::json::array({std::move(choice)})},
          {"usage", usage_json(generation.finished.prompt_tokens, generation.finished.completion_tokens)}};
}

nlohmann::json chunk_header(const std::string& id, std::string_view object, int64_t created, const std::string& model,
                            bool include_usage) {
  nlohmann::json json = {{"id", id}, {"object", object}, {"created", created}, {"model", model}};
  if (include_usage) json["usage"] = nullptr;
  return json;
}

std::string usage_chunk(nlohmann::json header, const engine::FinishedEvent& finished) {
  header["choices"] = nlohmann::json::array();
  header["usage"] = usage_json(finished.prompt_tokens, finished.completion_tokens);
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
