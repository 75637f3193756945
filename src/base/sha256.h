#pragma once
// sha256 as lowercase hex, used to compare token sequences across runs (exactness checks).
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace duet {

std::string sha256_hex(std::span<const uint8_t> bytes);
std::string sha256_hex(std::string_view text);
// The hash of token ids as little-endian int32, the form `duet bench` reports.
std::string sha256_of_ids(std::span<const int32_t> ids);

}  // namespace duet
