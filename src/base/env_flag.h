#pragma once
// A switch read from the environment (DUET_STEP_GAPS=1, DUET_PROFILE=1, ...): on when set, not empty and not "0".
#include <cstdlib>
#include <cstring>

namespace duet {

inline bool env_flag(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && value[0] != '\0' && std::strcmp(value, "0") != 0;
}

}  // namespace duet
