#pragma once
// Qwen3.5's 3-D rotary positions (M-RoPE, docs/vision.md 5), for prompts with images: every token has three position
// streams (time, height, width). Text tokens have the same value in all three, one more than the token before; an
// image's tokens (its merged patches, in raster order) sit at the image's start plus their (frame, row, column), and
// the text after an image continues at the image's start plus its larger merged side, not its token count. Decode
// rows continue the last prompt position + 1 in all three streams. With no image every stream is the token's index,
// and M-RoPE is exactly the 1-D RoPE duet computes for text.
#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace duet::model {

// One image's run of tokens in a prompt: `first` the index of its first <|image_pad|> token, its grid in patches
// (t, h, w, before the 2 x 2 merge): t * h * w / (merge * merge) tokens.
struct ImageRun {
  int32_t first = 0;
  int32_t t = 1, h = 0, w = 0;
};

struct RopePositions {
  std::vector<int32_t> time, height, width;  // one per prompt token
  // Decode rows' positions are their token index plus this (<= 0): max(all positions) + 1 - prompt length.
  int32_t delta = 0;
};

// The positions of a prompt of `length` tokens with `images` (in prompt order, not overlapping, each inside the
// prompt). Refuses (duet::Error) an image run that overlaps another or leaves the prompt, or a grid not divisible by
// the merge.
RopePositions mrope_positions(int32_t length, std::span<const ImageRun> images, int32_t merge = 2);

// Which stream (0 time, 1 height, 2 width) each rotary frequency j < rotary_dim / 2 reads, for the interleaved layout
// (`mrope_interleaved`; transformers implements only this one): height at j = 1, 4, ... (section[1] of them), width
// at j = 2, 5, ... (section[2]), time elsewhere. Refuses sections that do not fit the frequencies.
std::vector<int32_t> mrope_streams(int64_t rotary_dim, std::span<const int64_t> section);

}  // namespace duet::model
