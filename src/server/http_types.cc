#include "server/http_types.h"

#include <boost/beast/core/string.hpp>

#include "server/request_parsing.h"

namespace duet::server {

std::string_view HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (boost::beast::iequals(key, name)) return value;
  return {};
}

HttpResponse json_response(const nlohmann::json& body, int status) {
  HttpResponse res;
  res.status = status;
  res.body = json_text(body);
  return res;
}

HttpResponse error_response(const ApiError& error) {
  HttpResponse res = json_response(error_json(error), error.status());
  if (error.retry_after_s) res.headers.emplace_back("Retry-After", std::to_string(*error.retry_after_s));
  return res;
}

nlohmann::json request_json(const HttpRequest& req) { return parse_json_body(req.body); }

}  // namespace duet::server
