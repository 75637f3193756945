#pragma once
// Errors in OpenAI's shape: {"error": {"message", "type", "param", "code"}}. Routes throw ApiError; the HTTP
// layer turns it into the status and body (and Retry-After when the engine is full).
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

namespace duet::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string code = {});

  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  // OpenAI's "type" for this status (invalid_request_error, authentication_error, ...).
  std::string type() const;
  std::optional<int> retry_after_s;  // set for 429/503 so well-behaved clients back off

 private:
  int status_;
  std::string param_;
  std::string code_;
};

// A refusal of one request field: 400 naming the field in `param`.
[[noreturn]] void refuse_field(const std::string& field, const std::string& message);

std::string error_type_for_status(int status);
nlohmann::json error_json(int status, const std::string& message, const std::string& param = {},
                          const std::string& code = {});
nlohmann::json error_json(const ApiError& error);

// Serializes for the wire. Generated text may hold invalid UTF-8 (a token cut mid-character); it is replaced
// with U+FFFD instead of throwing.
std::string json_text(const nlohmann::json& value);
std::string json_text(const nlohmann::ordered_json& value);  // keeping its key order

}  // namespace duet::server
