#pragma once
// System One decisions for a route: a validated request encoded, run through the engine as a decide request (one
// prefill, its head inputs gathered chunk by chunk), and answered. Written against a parsed body and returning the
// response text, so any HTTP transport can call it.
#include <string>

#include "decision/request.h"
#include "server/server_context.h"

namespace duet::server {

// The response body (JSON text) for a decision request body parsed by decision::parse_decision_body. Throws
// ApiError: 404 when the model serves no decisions or `model` names another one, 413 for a prompt over the budget,
// 422 for an invalid request, 429 when the queue is full, 500 when the engine fails it, 503 when it is shutting
// down.
std::string answer_decision(ServerContext& context, const decision::Json& body);

// decision::parse_decision_body with its refusal as an ApiError.
decision::Json parse_decision_request_body(std::string_view body);

}  // namespace duet::server
