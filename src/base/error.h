#pragma once
// Errors that name the thing that failed. Thrown by loaders and parsers, caught at the route or the CLI and
// turned into a status code or an exit code with the message intact.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace duet {

// A refusal: the input (file, request, flag) is not what we support. The message names it.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A device (GPU) call failed after load. Its state can no longer be trusted, so it is fatal to the server: the engine
// ends every request with it and stops, and `duet serve` exits non-zero so that a supervisor restarts it.
class DeviceError : public Error {
 public:
  using Error::Error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace duet
