#include "server/http_types.h"

#include <boost/beast/core/string.hpp>

#include "base/error.h"
#include "base/log.h"
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

HttpResponse response_of(const std::function<HttpResponse()>& make, std::string_view context) {
  try {
    return make();
  } catch (const ApiError& error) {
    return error_response(error);
  } catch (const duet::Error& error) {
    return error_response(ApiError(400, error.what()));
  } catch (const std::exception& error) {
    log_warn("{}: {}", context, error.what());
    return error_response(ApiError(500, std::string("internal error: ") + error.what()));
  } catch (...) {
    log_warn("{}: an exception that is not a std::exception", context);
    return error_response(ApiError(500, "internal error"));
  }
}

nlohmann::ordered_json request_json(const HttpRequest& req) { return parse_json_body(req.body); }

}  // namespace duet::server
