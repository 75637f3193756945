#pragma once
// Which decoder an image needs, from its first bytes only: a declared media type is never trusted.
#include <cstdint>
#include <optional>
#include <span>

#include "image/image.h"

namespace duet::image {

// The format whose signature the bytes start with, or nothing.
std::optional<Format> sniff(std::span<const uint8_t> bytes);

}  // namespace duet::image
