#pragma once
// Ids and timestamps of answers: a fresh random id with a prefix ("chatcmpl-", "cmpl-", "call_", "msg_") and the
// Unix time in seconds (OpenAI's `created`).
#include <cstdint>
#include <string>
#include <string_view>

namespace duet::server {

std::string random_id(std::string_view prefix);
int64_t unix_now();

}  // namespace duet::server
