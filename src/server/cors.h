#pragma once
// Cross-origin requests from browsers (--cors-origin): off unless origins are given, `*` or a list. A preflight
// (OPTIONS with Origin and Access-Control-Request-Method) is answered from its header alone, before the key check
// (browsers send preflights without credentials), and the same way on every path, known or not, so it tells an
// unauthenticated client nothing about the routes. Answers to allowed origins carry Access-Control-Allow-Origin,
// errors included, so a page can read why it was refused.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/http_types.h"

namespace duet::server {

// The value for Access-Control-Allow-Origin when `origin` may read answers: `*` or the origin itself.
std::optional<std::string> allowed_origin(const std::vector<std::string>& allowed, std::string_view origin);

bool is_preflight(const HttpRequest& head);

// The answer to a preflight: 204 with the methods and headers the routes take, or 403 for an origin not allowed. The
// headers of cors_headers are not in it: the connection adds them to every answer, this one included.
HttpResponse preflight_response(const std::vector<std::string>& allowed, const HttpRequest& head);

// The headers every other answer to `head` carries (none without an allowed Origin).
HttpHeaders cors_headers(const std::vector<std::string>& allowed, const HttpRequest& head);

}  // namespace duet::server
