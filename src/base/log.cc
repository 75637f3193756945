#include "base/log.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>

namespace duet {

namespace {
LogLevel configured_level() {
  const char* env = std::getenv("DUET_LOG");
  std::string value = env != nullptr ? env : "info";
  if (value == "debug") return LogLevel::debug;
  if (value == "warn") return LogLevel::warn;
  if (value == "error") return LogLevel::error;
  return LogLevel::info;
}
}  // namespace

bool log_enabled(LogLevel level) {
  static const LogLevel threshold = configured_level();
  return level >= threshold;
}

void log_line(LogLevel level, std::string_view message) {
  static std::mutex mutex;
  static constexpr const char* kNames[] = {"debug", "info", "warn", "error"};
  auto now = std::chrono::system_clock::now();
  std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  int millis =
      static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%H:%M:%S", &utc);
  std::lock_guard lock(mutex);
  std::fprintf(stderr, "%s.%03d %s %.*s\n", stamp, millis, kNames[static_cast<int>(level)],
               static_cast<int>(message.size()), message.data());
}

}  // namespace duet
