#include "server/errors.h"

namespace duet::server {

ApiError::ApiError(int status, std::string message, std::string param, std::string code)
    : std::runtime_error(std::move(message)), status_(status), param_(std::move(param)), code_(std::move(code)) {}

std::string ApiError::type() const { return error_type_for_status(status_); }

void refuse_field(const std::string& field, const std::string& message) {
  throw ApiError(400, field + ": " + message, field, "invalid_value");
}

std::string error_type_for_status(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

nlohmann::json error_json(int status, const std::string& message, const std::string& param, const std::string& code) {
  nlohmann::json error = {{"message", message},
                          {"type", error_type_for_status(status)},
                          {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
                          {"code", code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code)}};
  return {{"error", error}};
}

nlohmann::json error_json(const ApiError& error) {
  return error_json(error.status(), error.what(), error.param(), error.code());
}

std::string json_text(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string json_text(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace duet::server
