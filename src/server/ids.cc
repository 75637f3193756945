#include "server/ids.h"

#include <fmt/format.h>

#include <chrono>
#include <random>

namespace duet::server {

std::string random_id(std::string_view prefix) {
  thread_local std::mt19937_64 generator{std::random_device{}()};
  return fmt::format("{}{:016x}{:08x}", prefix, generator(), static_cast<uint32_t>(generator()));
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace duet::server
