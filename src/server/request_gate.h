#pragma once
// What the server decides from a request's header alone, before a body byte is read, in this order: shutting down
// (503), a CORS preflight (answered here, when --cors-origin is set; server/cors.h), the key (401 on every path but
// /health, known or not, so a client without one learns nothing), a Content-Encoding (415: bodies are never inflated),
// a Transfer-Encoding other than chunked (501), the route (404, or 405 with Allow), a POST without Content-Length or
// chunked framing (411), a declared length over --max-body-bytes (413).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/api_keys.h"
#include "server/http_types.h"
#include "server/route_table.h"

namespace duet::server {

struct GateRules {
  const RouteTable& routes;
  const ApiKeys& keys;
  size_t max_body_bytes;
  bool shutting_down;
  const std::vector<std::string>* cors_origins = nullptr;
  bool loading = false;  // the model is not loaded yet: every route but /health is answered 503  // --cors-origin; none
                         // or empty: no preflight is answered
};

struct GateVerdict {
  const RouteTable::Route* route = nullptr;  // set when the request may go on
  std::string route_name;                    // for metrics: the path when a route has it, else "unmatched"
  std::optional<HttpResponse> refusal;       // set when it may not
};

// `head` is the request without its body; the body's framing is given by content_length and chunked.
GateVerdict check_request_head(const HttpRequest& head, std::optional<uint64_t> content_length, bool chunked,
                               const GateRules& rules);

}  // namespace duet::server
