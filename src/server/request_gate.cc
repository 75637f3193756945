#include "server/request_gate.h"

#include <fmt/format.h>

#include <boost/beast/core/string.hpp>

#include "server/cors.h"

namespace duet::server {
namespace {

std::string_view trimmed(std::string_view value) {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  return value;
}

}  // namespace

GateVerdict check_request_head(const HttpRequest& head, std::optional<uint64_t> content_length, bool chunked,
                               const GateRules& rules) {
  GateVerdict verdict;
  RouteTable::Match match = rules.routes.match(head.method, head.path);
  // A route's own path names it (a prefix route once, whatever id follows), so metrics labels stay few.
  verdict.route_name = match.route ? match.route->path : !match.allowed.empty() ? head.path : "unmatched";
  auto refuse = [&](ApiError error) {
    verdict.refusal = error_response(error);
    return verdict;
  };

  if (rules.shutting_down) {
    ApiError error(503, "the server is shutting down; retry on another instance or after it restarts", "",
                   "server_shutting_down");
    error.retry_after_s = 1;
    return refuse(error);
  }
  if (rules.cors_origins && !rules.cors_origins->empty() && is_preflight(head)) {
    verdict.refusal = preflight_response(*rules.cors_origins, head);
    return verdict;
  }
  if (rules.routes.needs_key(head.path) && !rules.keys.accepts(head.header("Authorization")) &&
      !(head.header("Authorization").empty() && rules.keys.accepts_key(head.header("x-api-key"))))
    return refuse(ApiError(401,
                           "missing or invalid API key; send `Authorization: Bearer <key>` (or `x-api-key: <key>`)", "",
                           "invalid_api_key"));
  if (std::string_view encoding = head.header("Content-Encoding");
      !encoding.empty() && !boost::beast::iequals(encoding, "identity"))
    return refuse(ApiError(415,
                           fmt::format("Content-Encoding `{}` is not accepted: send the request body uncompressed",
                                       encoding.substr(0, 64)),
                           "", "unsupported_content_encoding"));
  // Only plain chunked framing: `gzip, chunked` would be an inflation by another name.
  if (std::string_view framing = trimmed(head.header("Transfer-Encoding"));
      !framing.empty() && !(chunked && boost::beast::iequals(framing, "chunked")))
    return refuse(ApiError(
        501,
        fmt::format("Transfer-Encoding `{}` is not supported: send Content-Length or chunked", framing.substr(0, 64)),
        "", "unsupported_transfer_encoding"));
  if (!match.route && match.allowed.empty())
    return refuse(ApiError(404, "no such route; see docs/api.md for the routes duet serves", "", "not_found"));
  if (!match.route) {
    verdict.refusal = error_response(ApiError(
        405, fmt::format("method {} is not allowed on {}; use {}", head.method.substr(0, 16), head.path, match.allowed),
        "", "method_not_allowed"));
    verdict.refusal->headers.emplace_back("Allow", match.allowed);
    return verdict;
  }
  if (rules.loading && match.route->needs_key) {
    ApiError error(503, "the model is still loading; retry shortly (GET /health says when it is ready)", "",
                   "model_loading");
    error.retry_after_s = 1;
    return refuse(error);
  }
  if (match.route->method == RouteTable::Method::post && !content_length && !chunked)
    return refuse(
        ApiError(411, "a POST needs a body with Content-Length or Transfer-Encoding: chunked", "", "length_required"));
  if (content_length && *content_length > rules.max_body_bytes)
    return refuse(
        ApiError(413, fmt::format("the request body is larger than {} bytes (--max-body-bytes)", rules.max_body_bytes),
                 "", "request_too_large"));
  verdict.route = match.route;
  return verdict;
}

}  // namespace duet::server
