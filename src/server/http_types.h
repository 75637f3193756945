#pragma once
// The HTTP request and response as routes see them, whatever the transport: a route reads the method, path,
// headers and body, and answers with a status, headers and a body, or with a generation whose body comes from an
// engine request's events (generation.h).
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/errors.h"

namespace duet::server {

class GenerationBody;

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // as sent: GET, POST, HEAD, ...
  std::string target;  // path and query, as sent
  std::string path;    // the target without its query: what routes are matched against
  HttpHeaders headers;
  std::string body;  // whole (a chunked body is joined); never decompressed

  // The first header of that name, compared without case; empty when there is none.
  std::string_view header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  HttpHeaders headers;  // besides Content-Type, Content-Length, Transfer-Encoding and Connection (the transport's)
  std::string body;
  std::shared_ptr<GenerationBody> generation;  // when set, the body comes from the engine and `body` is unused
};

HttpResponse json_response(const nlohmann::json& body, int status = 200);
// An error in OpenAI's shape, with Retry-After when the error has one.
HttpResponse error_response(const ApiError& error);

// What `make` returns, or what it throws as a response: ApiError with its status, duet::Error 400, anything else 500
// (logged with `context`, the request's method and path).
HttpResponse response_of(const std::function<HttpResponse()>& make, std::string_view context);

// The request's body as a JSON object (400 invalid_json otherwise; see parse_json_body).
nlohmann::ordered_json request_json(const HttpRequest& req);

}  // namespace duet::server
