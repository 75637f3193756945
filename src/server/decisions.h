#pragma once
// System One decisions for a route: a validated request encoded, run through the engine as a decide request (one
// prefill, its head inputs gathered chunk by chunk), and answered when the engine finishes it. Written against a
// parsed body and returning an HttpResponse (http_types.h), so no thread waits on the engine.
#include "decision/request.h"
#include "server/http_types.h"
#include "server/server_context.h"

namespace duet::server {

// The response to a decision request body parsed by decision::parse_decision_body: validated, encoded and submitted
// now, its JSON written when the engine's FinishedEvent comes (a whole answer, generation.h). Throws ApiError: 404
// when the model serves no decisions or `model` names another one, 413 for a prompt over the budget, 422 for an
// invalid request, 429 when the queue is full. Once submitted, the answer is 500 when the engine fails the decision
// and 503 when it is cancelled (the server stopping, or the client gone).
HttpResponse answer_decision(ServerContext& context, const decision::Json& body);

// decision::parse_decision_body with its refusal as an ApiError.
decision::Json parse_decision_request_body(std::string_view body);

}  // namespace duet::server
