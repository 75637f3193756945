#pragma once
// Transparency, as the Qwen3.5 processor treats it: Pillow's convert("RGB"), which drops an alpha channel and keeps
// the colour stored under it (a palette's transparent index keeps its palette colour). Measured on the GPU machine
// (tools/make_vision_fixtures.py, rgb_rule and alpha_png): transformers 5.17's Qwen2VLImageProcessor does not
// composite over white, whatever its older convert_to_rgb did.
#include <cstdint>
#include <span>
#include <vector>

namespace duet::image {

// rgba: (pixels, 4) -> (pixels, 3), the alpha channel dropped.
std::vector<uint8_t> drop_alpha(std::span<const uint8_t> rgba);

}  // namespace duet::image
