#pragma once
// A refused decision request: the HTTP status (400 unparseable, 413 too long, 422 invalid), a stable code clients
// can switch on, and the parameter it is about ("questions.team.criteria"); the message names them too.
#include <string>

#include "base/error.h"

namespace duet::decision {

class DecisionError : public Error {
 public:
  DecisionError(int status, std::string code, std::string param, const std::string& message)
      : Error(message), status_(status), code_(std::move(code)), param_(std::move(param)) {}
  int status() const { return status_; }
  const std::string& code() const { return code_; }
  const std::string& param() const { return param_; }

 private:
  int status_;
  std::string code_;
  std::string param_;
};

// A 422 about `param`, whose message starts with it.
template <typename... Args>
[[noreturn]] void refuse(std::string code, const std::string& param, fmt::format_string<Args...> format,
                         Args&&... args) {
  throw DecisionError(422, std::move(code), param, param + ": " + fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace duet::decision
