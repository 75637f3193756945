// What one image costs the vision tower on the GPU (model/cuda/device_vision_tower.h): the 9B's tower shape (27 blocks
// of 1152, 16 heads of 72) with seeded random BF16 weights, one 1024 x 1024 image (a 64 x 64 grid of patches, 1024
// tokens) by default, or `bench_vision_tower SIDE` for a SIDE x SIDE image (a multiple of 32). A warm-up run, then the
// median and the fastest of 5 runs, each from the pixel values on the host to the rows on the host, in ms.
// Not a test: numbers for docs/benchmarks.md.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "model/cuda/device_vision_tower.h"
#include "random_vision_tower.h"

int main(int argc, char** argv) {
  try {
    const int64_t side = argc > 1 ? std::atoll(argv[1]) : 1024;
    if (side <= 0 || side % 32 != 0) {
      std::fprintf(stderr, "usage: bench_vision_tower [SIDE]: SIDE a positive multiple of 32 (pixels)\n");
      return 2;
    }
    const duet::model::VisionGrid grid{1, side / 16, side / 16};
    std::printf("building the 9B tower's random weights...\n");
    duet::testing::RandomVisionTower tower(duet::testing::qwen35_9b_vision_config());
    duet::model::cuda::DeviceVisionTower gpu(tower.config(), tower.weights(), grid.patches());
    std::printf("weights %.1f MB, scratch %.1f MB for %lld patches\n", static_cast<double>(gpu.weight_bytes()) / 1e6,
                static_cast<double>(gpu.scratch_bytes()) / 1e6, static_cast<long long>(grid.patches()));
    for (const std::string& line : gpu.describe_gemms()) std::printf("  %s\n", line.c_str());
    const std::vector<float> pixels = tower.pixels(grid, 1);
    std::vector<float> rows = gpu.rows(pixels.data(), grid);  // warm-up
    std::vector<double> ms;
    for (int i = 0; i < 5; ++i) {
      const auto start = std::chrono::steady_clock::now();
      const std::vector<float> again = gpu.rows(pixels.data(), grid);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      if (again != rows) std::printf("run %d: other rows than the warm-up's (the tower must be deterministic)\n", i);
    }
    std::sort(ms.begin(), ms.end());
    double finite = 0;
    for (float v : rows) finite += std::isfinite(v) ? 1 : 0;
    std::printf(
        "vision tower, %lld x %lld image (%lld patches, %zu tokens): median %.2f ms, fastest %.2f ms (%.0f of "
        "%zu values finite)\n",
        static_cast<long long>(side), static_cast<long long>(side), static_cast<long long>(grid.patches()),
        rows.size() / static_cast<size_t>(tower.config().out_hidden_size), ms[ms.size() / 2], ms.front(), finite,
        rows.size());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_vision_tower: %s\n", e.what());
    return 1;
  }
}
