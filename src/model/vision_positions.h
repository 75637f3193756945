#pragma once
// Where each patch of an image sits, and what that position adds to the tower (docs/vision.md 2.5, 3.2, 3.3): the
// patch order of pixel_values (2x2 merge blocks in raster order, the four patches of a block inside), the learned
// position table interpolated to the image's grid, and the 2-D rotary angles.
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/vision_config.h"

namespace duet::model {

// image_grid_thw: frames and patches per column and row (not merged).
struct VisionGrid {
  int64_t t = 1, h = 0, w = 0;
  int64_t patches() const { return t * h * w; }
};

// One patch's place in its frame's grid of grid.h rows and grid.w columns.
struct PatchPosition {
  int64_t row = 0, col = 0;
};

// Throws duet::Error unless h and w are positive multiples of the merge size (t, h, w capped so products fit).
void check_vision_grid(const VisionConfig& config, const VisionGrid& grid);

// The (row, col) of every row of pixel_values, in its order: frame, block row, block column, then the merge block's
// patches row by row. [grid.patches()]
std::vector<PatchPosition> patch_positions(const VisionGrid& grid, int64_t merge);

// The position table bilinearly interpolated (align_corners) at each of `positions` on a grid.h x grid.w grid, the
// table being a G x G grid: per patch the four table rows it reads and their weights, in the order they are summed,
// pos = ((T[index[0]] w[0] + T[index[1]] w[1]) + T[index[2]] w[2]) + T[index[3]] w[3]. The host tower sums them here,
// the device tower (model/cuda) on the GPU from these same numbers. [positions.size() * 4] each.
struct PositionTaps {
  std::vector<int32_t> index;
  std::vector<float> weight;
};
PositionTaps position_taps(const VisionConfig& config, const VisionGrid& grid,
                           const std::vector<PatchPosition>& positions);

// x[i] += the interpolated table at positions[i] (position_taps). x: [positions.size(), hidden].
void add_position_embedding(const VisionConfig& config, const backend::Weight& table, const VisionGrid& grid,
                            const std::vector<PatchPosition>& positions, float* x);

// cos and sin of the rotary angles of every position: [positions.size(), head_dim] each; dims [0, head_dim / 4) and
// [head_dim / 2, 3 head_dim / 4) turn with the row, the other two quarters with the column.
struct VisionRotary {
  int64_t head_dim = 0;
  std::vector<float> cos, sin;
};
VisionRotary vision_rotary(const VisionConfig& config, const std::vector<PatchPosition>& positions);

// x[0, head_dim) = x * cos + rotate_half(x) * sin, rotate_half(x) = [-x[d/2, d), x[0, d/2)], for one head.
void apply_vision_rotary(const float* cos, const float* sin, int64_t head_dim, float* x);

// torch.linspace(start, end, steps)[i] in float32 as torch's CPU kernel computes it (from the nearer end).
float linspace_f32(float start, float end, int64_t steps, int64_t i);

}  // namespace duet::model
