#pragma once
// The vision goldens' prompts (tools/make_vision_fixtures.py: `one`, `two` and `decode` on tiny-vl) as duet feeds them
// to the language model: the encoded images under tests/fixtures/vision/images decoded and preprocessed by src/image,
// each image's rows from duet's CPU tower (or a given VisionModel's: the GPU test's served path), the 3-D positions and
// the rope delta from model/mrope.h; and the planted faults the golden tests must catch. Shared by model_test
// (vision_lm_test.cc) (CPU) and cuda_vision_cuda_test (GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "engine/piece_runner.h"
#include "golden_fixtures.h"
#include "image/decode.h"
#include "image/patches.h"
#include "image/resize.h"
#include "image/smart_resize.h"
#include "model/model.h"
#include "model/mrope.h"
#include "model/vision_model.h"
#include "model/vision_tower.h"
#include "model/weight_binder.h"

namespace duet::testing {

// Which images each golden prompt reads, in prompt order (make_vision_fixtures.py: names[1]; names[2], names[0];
// names[0] of its image list small_png, portrait_jpg, wide_png, ...).
struct VisionPromptImages {
  const char* label;
  std::vector<std::string> images;
};
inline const std::vector<VisionPromptImages>& vision_golden_prompts() {
  static const std::vector<VisionPromptImages> prompts = {{"one", {"portrait_jpg"}},
                                                          {"two", {"wide_png", "small_png"}}};
  return prompts;
}
inline const VisionPromptImages& vision_decode_prompt() {
  static const VisionPromptImages decode = {"decode", {"small_png"}};
  return decode;
}

// Faults planted in what is fed, each of which a golden test must see: every token at its index (1-D positions, no
// delta: the text path), the height and width streams traded, an image's rows in column-major token order, decode
// rows without the prompt's rope delta (the prompt itself is right).
enum class VisionPlant { none, positions_1d, swapped_streams, transposed_rows, no_decode_delta };

// A prompt as model::Piece takes it.
struct VisionPrompt {
  std::vector<int32_t> ids;
  std::vector<float> image_rows;   // every image's rows, in prompt order [image tokens, hidden]
  std::vector<int32_t> positions;  // [tokens, 3] (time, height, width); empty for VisionPlant::positions_1d
  int32_t delta = 0;               // the rope delta of later rows (0 for VisionPlant::positions_1d)
};

// One image as duet reads it: its rows (one per image token, block raster order) and its grid in patches.
struct TowerImage {
  std::vector<float> rows;  // [tokens, hidden]
  model::VisionGrid grid;
};

// tiny-vl's tower and the vision goldens.
class VisionFixture {
 public:
  // Why the fixture cannot be used, or empty.
  static std::string missing() {
    const std::string golden = golden_fixture("vision", "fp32"), dir = model_fixture("tiny-vl");
    if (std::filesystem::exists(golden) && std::filesystem::exists(dir + "/config.json")) return "";
    return golden + " or " + dir + " is not there: tools/make_vision_fixtures.py (tools/README.md)";
  }

  VisionFixture()
      : model_dir_(model_fixture("tiny-vl")),
        goldens_(golden_fixture("vision", "fp32")),
        golden_file_(checkpoint::Checkpoint::open_file(golden_fixture("vision", "fp32"))),
        checkpoint_(checkpoint::Checkpoint::open(model_dir_)),
        config_(model::VisionConfig::load(model_dir_ + "/config.json")) {
    size_t bytes = 0;
    model::WeightBinder bind(checkpoint_, bytes);
    weights_ = model::bind_vision_weights(bind, config_);
  }

  const std::string& model_dir() const { return model_dir_; }
  const Goldens& goldens() const { return goldens_; }
  const model::VisionConfig& config() const { return config_; }

  // tests/fixtures/vision/images/<name>.*: decoded, resized and cut into patches by src/image, through duet's host
  // tower in fp32, or through `on` (a server's VisionModel, e.g. on the GPU) when given.
  TowerImage tower(const std::string& name, const model::VisionModel* on = nullptr) const {
    std::string path;
    for (const char* ext : {".png", ".jpg", ".webp", ".gif"})
      if (const std::string p = fixture_path("vision/images/" + name + ext); std::filesystem::exists(p)) path = p;
    EXPECT_FALSE(path.empty()) << name;
    std::ifstream in(path, std::ios::binary);
    const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const image::Image decoded = image::decode(bytes);
    const image::Size size = image::smart_resize(decoded.height, decoded.width, 32, kMinPixels, kMaxPixels);
    const image::Patches patches = image::to_patches(image::resize_bicubic(decoded, size.width, size.height));
    TowerImage out;
    out.grid = model::VisionGrid{patches.grid_t, patches.grid_h, patches.grid_w};
    out.rows = on != nullptr ? on->rows(patches.values, out.grid)
                             : model::vision_forward(config_, weights_, patches.values.data(), out.grid);
    return out;
  }

  // The golden prompt `label` reading `images`, with `plant` planted; the images' rows from tower(name, on).
  VisionPrompt prompt(const std::string& label, const std::vector<std::string>& images, VisionPlant plant,
                      const model::VisionModel* on = nullptr) const {
    const int64_t h = config_.out_hidden_size, image_token = config_.image_token_id;
    VisionPrompt p;
    p.ids = goldens_.i32(label + ".ids");
    std::vector<model::ImageRun> runs;
    const auto* grids = golden_file_.find(label + ".grids");
    EXPECT_NE(grids, nullptr) << label;
    for (size_t i = 0; i < p.ids.size(); ++i) {
      if (p.ids[i] != image_token || (i > 0 && p.ids[i - 1] == p.ids[i])) continue;
      const TowerImage image = tower(images.at(runs.size()), on);
      const int64_t* golden_grid = grids->data<int64_t>() + 3 * runs.size();  // a check of src/image, not an input
      EXPECT_EQ(image.grid.h, golden_grid[1]) << label;
      EXPECT_EQ(image.grid.w, golden_grid[2]) << label;
      runs.push_back(model::ImageRun{.first = static_cast<int32_t>(i),
                                     .t = static_cast<int32_t>(image.grid.t),
                                     .h = static_cast<int32_t>(image.grid.h),
                                     .w = static_cast<int32_t>(image.grid.w)});
      const std::vector<float> rows = plant == VisionPlant::transposed_rows ? transposed(image, h) : image.rows;
      p.image_rows.insert(p.image_rows.end(), rows.begin(), rows.end());
    }
    EXPECT_EQ(runs.size(), images.size()) << label;
    if (plant == VisionPlant::positions_1d) return p;  // every stream the index, no delta: the text path
    const model::RopePositions positions = model::mrope_positions(static_cast<int32_t>(p.ids.size()), runs);
    for (size_t t = 0; t < p.ids.size(); ++t)
      if (plant == VisionPlant::swapped_streams) {  // rows read as columns: the height and width streams traded
        p.positions.insert(p.positions.end(), {positions.time[t], positions.width[t], positions.height[t]});
      } else {
        p.positions.insert(p.positions.end(), {positions.time[t], positions.height[t], positions.width[t]});
      }
    p.delta = positions.delta;
    return p;
  }

 private:
  // tiny-vl's preprocessor_config.json (the stock 9B settings): size.shortest_edge / longest_edge, in pixels.
  static constexpr uint64_t kMinPixels = 256 * 256, kMaxPixels = 4096 * 4096;

  // The rows of `image` read in column-major token order: a permutation of the right rows, the wrong places.
  static std::vector<float> transposed(const TowerImage& image, int64_t h) {
    const int64_t rows = image.grid.h / 2, cols = image.grid.w / 2;
    std::vector<float> out(image.rows.size());
    for (int64_t k = 0; k < rows * cols; ++k) {
      const int64_t source = (k % rows) * cols + k / rows;
      std::copy_n(image.rows.begin() + source * h, h, out.begin() + k * h);
    }
    return out;
  }

  std::string model_dir_;
  Goldens goldens_;
  checkpoint::Checkpoint golden_file_, checkpoint_;
  model::VisionConfig config_;
  model::VisionWeights weights_;
};

// The prompt's final-norm rows, prefilled in chunks of `chunk` tokens through one sequence, each chunk with its own
// image rows and 3-D positions (a chunk may cut an image).
inline std::vector<float> prefill_in_chunks(model::Model& model, const VisionPrompt& p, size_t chunk) {
  const auto h = static_cast<size_t>(model.config().hidden_size);
  const int64_t image_token = model.config().image_token_id;
  engine::PieceRunner runner(model, 1, static_cast<int32_t>(p.ids.size()));
  const int32_t slot = runner.open();
  std::vector<float> rows;
  size_t image_rows_used = 0;
  for (size_t start = 0; start < p.ids.size(); start += chunk) {
    const size_t end = std::min(p.ids.size(), start + chunk);
    const std::span<const int32_t> tokens(p.ids.data() + start, end - start);
    const auto images = static_cast<size_t>(std::count(tokens.begin(), tokens.end(), image_token));
    const std::span<const int32_t> positions =
        p.positions.empty() ? std::span<const int32_t>{} : std::span(p.positions).subspan(3 * start, 3 * (end - start));
    const auto out =
        runner.run(model::Piece{.slot = slot,
                                .tokens = tokens,
                                .wants = model::RowOutput::norm_rows,
                                .image_rows = std::span(p.image_rows).subspan(image_rows_used * h, images * h),
                                .rope_positions = positions});
    image_rows_used += images;
    rows.insert(rows.end(), out[0].norm_rows.begin(), out[0].norm_rows.end());
  }
  return rows;
}

}  // namespace duet::testing
