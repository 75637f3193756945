#include "server/cors.h"

#include <algorithm>

namespace duet::server {

std::optional<std::string> allowed_origin(const std::vector<std::string>& allowed, std::string_view origin) {
  if (origin.empty() || allowed.empty()) return std::nullopt;
  if (std::find(allowed.begin(), allowed.end(), "*") != allowed.end()) return "*";
  if (std::find(allowed.begin(), allowed.end(), origin) != allowed.end()) return std::string(origin);
  return std::nullopt;
}

bool is_preflight(const HttpRequest& head) {
  return head.method == "OPTIONS" && !head.header("Origin").empty() &&
         !head.header("Access-Control-Request-Method").empty();
}

HttpResponse preflight_response(const std::vector<std::string>& allowed, const HttpRequest& head) {
  auto origin = allowed_origin(allowed, head.header("Origin"));
  if (!origin)
    return error_response(ApiError(403, "this origin is not allowed (--cors-origin)", "", "cors_origin_not_allowed"));
  // Only what a preflight adds: Access-Control-Allow-Origin, Vary and the exposed headers come with every answer to an
  // allowed origin (cors_headers, added by the connection); sending them here too repeated them, and a browser
  // refuses a preflight whose Access-Control-Allow-Origin appears twice.
  HttpResponse res;
  res.status = 204;
  res.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
  // Whatever headers the page means to send (the SDKs add their own x-stainless-* and the like): the key check,
  // not the header list, decides who is served.
  std::string_view asked = head.header("Access-Control-Request-Headers");
  res.headers.emplace_back("Access-Control-Allow-Headers", asked.empty() ? std::string("Authorization, Content-Type")
                                                                         : std::string(asked.substr(0, 4096)));
  res.headers.emplace_back("Access-Control-Max-Age", "600");
  return res;
}

HttpHeaders cors_headers(const std::vector<std::string>& allowed, const HttpRequest& head) {
  HttpHeaders headers;
  auto origin = allowed_origin(allowed, head.header("Origin"));
  if (!origin) return headers;
  headers.emplace_back("Access-Control-Allow-Origin", *origin);
  if (*origin != "*") headers.emplace_back("Vary", "Origin");  // caches keep one answer per origin
  // A page can read why to wait (Retry-After), what of its request had no effect (X-Duet-Ignored-Fields) and where a
  // decision's time went (Server-Timing).
  headers.emplace_back("Access-Control-Expose-Headers",
                       "Retry-After, X-Request-Id, X-Duet-Ignored-Fields, Server-Timing");
  return headers;
}

}  // namespace duet::server
