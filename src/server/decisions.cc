#include "server/decisions.h"

#include <fmt/format.h>

#include <memory>

#include "decision/answers.h"
#include "decision/encoder.h"
#include "decision/head_sinks.h"
#include "server/errors.h"
#include "server/generation.h"

namespace duet::server {

namespace {

ApiError api_error(const decision::DecisionError& error) {
  return ApiError(error.status(), error.what(), error.param(), error.code());
}

std::shared_ptr<engine::RequestHandle> submit_decision(ServerContext& context, engine::Request request) {
  try {
    return submit_request(context, std::move(request), "state");
  } catch (const ApiError& error) {
    // The encoder keeps the prompt within --context; what is left is a KV cache smaller than the prompt: too long.
    if (error.code() == "context_length_exceeded") throw ApiError(413, error.what(), error.param(), error.code());
    throw;
  }
}

// The answer once the engine finished the decision (it sends no token, only its FinishedEvent); an engine error is
// answered by collect_generation.
HttpResponse finished_decision(const ServerContext& context, const decision::DecisionRequest& request,
                               const decision::Encoding& encoding, const engine::FinishedEvent& finished) {
  switch (finished.reason) {
    case engine::FinishReason::stop: {
      HttpResponse res;
      res.body = decision::decision_response(request, encoding, finished.decision_logits,
                                             context.options.served_model_name, finished.cached_tokens);
      return res;
    }
    case engine::FinishReason::cancelled:
      throw ApiError(503,
                     "the decision was cancelled before it was made (the server is stopping, or the client went away)",
                     "", "cancelled");
    default:
      throw ApiError(500, "the decision failed: " + finished.error, "", "engine_error");
  }
}

}  // namespace

decision::Json parse_decision_request_body(std::string_view body) {
  try {
    return decision::parse_decision_body(body);
  } catch (const decision::DecisionError& error) {
    throw api_error(error);
  }
}

HttpResponse answer_decision(ServerContext& context, const decision::Json& body) {
  if (!context.decisions)
    throw ApiError(404,
                   fmt::format("`{}` serves no decisions: its folder has no joint_head.safetensors and "
                               "joint_head_config.json",
                               context.options.served_model_name),
                   "", "decisions_not_supported");
  const DecisionSupport& support = *context.decisions;
  try {
    auto request =
        std::make_shared<const decision::DecisionRequest>(decision::validate_decision_request(body, support.limits));
    if (request->model != context.options.served_model_name)
      throw ApiError(404,
                     fmt::format("the model `{}` does not exist; this server serves `{}`",
                                 request->model.substr(0, 200), context.options.served_model_name),
                     "model", "model_not_found");
    auto encoding = std::make_shared<const decision::Encoding>(
        decision::encode_decision(context.tokenizer, *request, support.max_length));
    engine::Request engine_request;
    engine_request.kind = engine::RequestKind::decide;
    engine_request.adapter = support.adapter;
    engine_request.prompt = encoding->ids;
    engine_request.decision = support.sinks->make(*encoding);
    return collect_generation(
        context, {submit_decision(context, std::move(engine_request))},
        [&context, request, encoding](std::span<const CollectedGeneration> generations) {
          return finished_decision(context, *request, *encoding, generations.front().finished);
        },
        "the decision failed");
  } catch (const decision::DecisionError& error) {
    throw api_error(error);
  }
}

}  // namespace duet::server
