#pragma once
// One-line logs to stderr with a timestamp; the level comes from DUET_LOG (debug, info, warn, error).
#include <fmt/format.h>

#include <string_view>

namespace duet {

enum class LogLevel { debug = 0, info = 1, warn = 2, error = 3 };

bool log_enabled(LogLevel level);
void log_line(LogLevel level, std::string_view message);

template <typename... Args>
void log_info(fmt::format_string<Args...> format, Args&&... args) {
  if (log_enabled(LogLevel::info)) log_line(LogLevel::info, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void log_warn(fmt::format_string<Args...> format, Args&&... args) {
  if (log_enabled(LogLevel::warn)) log_line(LogLevel::warn, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void log_error(fmt::format_string<Args...> format, Args&&... args) {
  if (log_enabled(LogLevel::error)) log_line(LogLevel::error, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void log_debug(fmt::format_string<Args...> format, Args&&... args) {
  if (log_enabled(LogLevel::debug)) log_line(LogLevel::debug, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace duet
