// POST /v1/completions: a text or token-id prompt continued as is (no template), answered as OpenAI's
// text_completion, whole or as a stream.
#include <fmt/format.h>

#include <limits>

#include "base/exact_json.h"
#include "server/errors.h"
#include "server/generation.h"
#include "server/request_parsing.h"
#include "server/route_table.h"
#include "server/sse.h"
#include "server/structured_output.h"

namespace duet::server {
namespace {

struct CompletionRequest {
  std::vector<int32_t> prompt;
  SamplingRequest sampling;
  StreamRequest stream;
  std::optional<int32_t> logprobs;  // the legacy integer: how many alternatives per token
  ClientTags client;
  IgnoredFields ignored;  // unknown fields the body carried
  OutputFormat format;    // response_format, as on chat (structured_output.h)
};

std::vector<int32_t> parse_token_ids(const Json& ids, const std::string& name) {
  std::vector<int32_t> prompt;
  prompt.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const Json& id = ids[i];
    std::string id_name = fmt::format("{}[{}]", name, i);
    if (exact_integer_text(id)) refuse_field(id_name, "not a token id");  // beyond 64 bits
    if (!id.is_number_integer()) refuse_field(id_name, "expected a token id (an integer)");
    if (id.is_number_unsigned() ? id.get<uint64_t>() > uint64_t{std::numeric_limits<int32_t>::max()}
                                : id.get<int64_t>() < 0)
      refuse_field(id_name, "not a token id");
    prompt.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return prompt;
}

// prompt: a string, an array of token ids, or a batch of exactly one of those.
std::vector<int32_t> parse_prompt(const Json& body, const tokenizer::Tokenizer& tokenizer) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) refuse_field("prompt", "missing");
  std::vector<int32_t> prompt;
  if (it->is_string()) {
    prompt = tokenizer.encode(it->get<std::string>());
  } else if (it->is_array()) {
    if (it->empty()) refuse_field("prompt", "must not be empty");
    const Json& first = it->front();
    if (first.is_number() || exact_integer_text(first)) {
      prompt = parse_token_ids(*it, "prompt");
    } else if (it->size() != 1) {
      refuse_field("prompt", "one prompt per request; batched prompts are not supported");
    } else if (first.is_string()) {
      prompt = tokenizer.encode(first.get<std::string>());
    } else if (first.is_array()) {
      prompt = parse_token_ids(first, "prompt[0]");
    } else {
      refuse_field("prompt[0]", "expected a string or an array of token ids");
    }
  } else {
    refuse_field("prompt", "expected a string or an array of token ids");
  }
  if (prompt.empty()) refuse_field("prompt", "the prompt has no tokens");
  return prompt;
}

CompletionRequest parse_completion_request(const Json& body, const ServerContext& context) {
  CompletionRequest request;
  check_generation_fields(body, {"prompt", "best_of", "echo", "suffix", "user", "response_format"}, {},
                          request.ignored);
  check_model(body, context.options.served_model_name);
  if (read_bool(body, "echo", "echo").value_or(false)) refuse_field("echo", "echo is not supported");
  if (auto suffix = read_string(body, "suffix", "suffix"); suffix && !suffix->empty())
    refuse_field("suffix", "suffix (insertion) is not supported");
  request.sampling = parse_sampling(body);
  request.stream = parse_stream(body, request.ignored);
  if (auto logprobs = read_integer(body, "logprobs", "logprobs", 0, 20)) {
    request.logprobs = static_cast<int32_t>(*logprobs);
    request.sampling.params.top_logprobs = *request.logprobs;
  }
  request.prompt = parse_prompt(body, context.tokenizer);
  request.client = parse_client_tags(body);
  if (auto it = body.find("response_format"); it != body.end() && !it->is_null())
    request.format = parse_response_format(*it, "response_format");
  return request;
}

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
    CompletionRequest request = parse_completion_request(request_json(req), context);
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
