// POST /v1/completions: a text or token-id prompt continued as is (no template), answered as OpenAI's
// text_completion, whole or as a stream.
#include <fmt/format.h>

#include "server/completions_request.h"
#include "server/errors.h"
#include "server/generation.h"
#include "server/request_parsing.h"
#include "server/route_table.h"
#include "server/sse.h"
#include "server/structured_output.h"

namespace duet::server {
namespace {

// The legacy logprobs object for a run of tokens; `offset` is where their text starts in the completion.
nlohmann::json legacy_logprobs(const ServerContext& context, std::span<const engine::TokenEvent> tokens,
                               size_t& offset) {
  nlohmann::json json = {{"tokens", nlohmann::json::array()},
                         {"token_logprobs", nlohmann::json::array()},
                         {"top_logprobs", nlohmann::json::array()},
                         {"text_offset", nlohmann::json::array()}};
  for (const auto& token : tokens) {
    json["tokens"].push_back(token_text(context.tokenizer, token.id));
    json["token_logprobs"].push_back(token.logprob.value_or(0.0f));
    auto top = nlohmann::json::object();
    for (const auto& candidate : token.top_logprobs)
      top[token_text(context.tokenizer, candidate.id)] = candidate.logprob;
    json["top_logprobs"].push_back(std::move(top));
    json["text_offset"].push_back(offset);
    offset += token.text.size();
  }
  return json;
}

constexpr int32_t kCompletionsDefaultMaxTokens = 16;

struct CompletionReply {
  std::string id = random_id("cmpl-");
  int64_t created = unix_now();
  std::string model;
};

class CompletionStreamFormatter final : public StreamFormatter {
 public:
  CompletionStreamFormatter(const ServerContext& context, CompletionReply reply, CompletionRequest request)
      : context_(context),
        reply_(std::move(reply)),
        request_(std::move(request)),
        offsets_(static_cast<size_t>(request_.sampling.n), 0) {}

  std::string tokens(size_t choice, std::span<const engine::TokenEvent> tokens) override {
    std::string text;
    auto ids = nlohmann::json::array();
    for (const auto& token : tokens) {
      text += token.text;
      ids.push_back(token.id);
    }
    nlohmann::json logprobs = nullptr;
    if (request_.logprobs) logprobs = legacy_logprobs(context_, tokens, offsets_[choice]);
    return chunk(choice, text, std::move(logprobs), nullptr, std::move(ids));
  }

  std::string finish(size_t choice, const engine::FinishedEvent& finished) override {
    if (finished.reason == engine::FinishReason::error)
      return sse_event(error_json(500, "generation failed: " + finished.error, "", "engine_error"));
    return chunk(choice, finished.text_tail, nullptr, engine::to_string(finished.reason), nlohmann::json::array());
  }

  std::string end(const GenerationUsage& usage) override {
    return (request_.stream.include_usage ? usage_chunk(base(), usage) : std::string()) + sse_done();
  }

 private:
  nlohmann::json base() const {
    return chunk_header(reply_.id, "text_completion", reply_.created, reply_.model, request_.stream.include_usage);
  }

  std::string chunk(size_t index, const std::string& text, nlohmann::json logprobs, nlohmann::json finish_reason,
                    nlohmann::json ids) const {
    nlohmann::json choice = {{"index", index},
                             {"text", text},
                             {"logprobs", std::move(logprobs)},
                             {"finish_reason", std::move(finish_reason)}};
    if (request_.sampling.return_token_ids) choice["token_ids"] = std::move(ids);
    nlohmann::json json = base();
    json["choices"] = nlohmann::json::array({std::move(choice)});
    return sse_event(json);
  }

  const ServerContext& context_;
  CompletionReply reply_;
  CompletionRequest request_;
  std::vector<size_t> offsets_;  // per choice: where the next tokens' text starts in its completion
};

nlohmann::json completion_json(const ServerContext& context, const CompletionReply& reply,
                               const CompletionRequest& request, std::span<const CollectedGeneration> generations) {
  auto choices = nlohmann::json::array();
  for (size_t i = 0; i < generations.size(); ++i) {
    const CollectedGeneration& generation = generations[i];
    nlohmann::json choice = {{"index", i},
                             {"text", generation.text},
                             {"logprobs", nullptr},
                             {"finish_reason", engine::to_string(generation.finished.reason)}};
    if (request.logprobs) {
      size_t offset = 0;
      choice["logprobs"] = legacy_logprobs(context, generation.tokens, offset);
    }
    choices.push_back(std::move(choice));
  }
  return whole_answer_json({reply.id, "text_completion", reply.created, reply.model}, std::move(choices),
                           request.sampling.return_token_ids, generations);
}

}  // namespace

void add_completions_route(RouteTable& table, ServerContext& context) {
  table.add(RouteTable::Method::post, "/v1/completions", [&context](const HttpRequest& req) {
    CompletionRequest request =
        parse_completion_request(request_json(req), context.options.served_model_name, context.tokenizer);
    engine::Request engine_request;
    engine_request.prompt = request.prompt;
    engine_request.sampling = request.sampling.params;
    // OpenAI's legacy completions default to 16 tokens (its API reference), not to --max-tokens: clients written for
    // it send no max_tokens and expect a short answer.
    engine_request.sampling.max_tokens =
        resolve_max_tokens(request.sampling.max_tokens, static_cast<int32_t>(request.prompt.size()),
                           kCompletionsDefaultMaxTokens, context.options.context, "prompt");
    apply_output_format(context, request.format, engine_request, false);
    CompletionReply reply;
    reply.model = context.options.served_model_name;
    Choices choices = submit_choices(context, engine_request, request.sampling.n, "prompt");
    return generation_response(
        context, std::move(choices), request.stream.stream,
        [&] { return std::make_unique<CompletionStreamFormatter>(context, reply, request); },
        [&context, reply, request](std::span<const CollectedGeneration> generations) {
          return json_response(completion_json(context, reply, request, generations));
        },
        request.client, report_ignored_fields(request.ignored, "/v1/completions"));
  });
}

}  // namespace duet::server
