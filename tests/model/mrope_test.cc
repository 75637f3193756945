// M-RoPE positions (src/model/mrope.h). Against transformers: the prompts of tools/make_vision_fixtures.py (one image,
// two images, a decode prompt), whose get_rope_index positions and rope_delta it saved with the images' grids in
// tests/fixtures/goldens/vision.fp32.safetensors; skipped, saying so, until those goldens are committed. Always: a
// prompt without images is the 1-D positions duet computes for text, the streams' frequency layout for Qwen3.5's
// [11, 11, 10], and refusals. The control: the same golden check with an image's rows and columns swapped must fail.
#include "model/mrope.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "../tests_dir.h"
#include "base/error.h"
#include "checkpoint/safetensors.h"

namespace duet::model {
namespace {

std::string golden_path() { return duet::testing::tests_dir() + "/fixtures/goldens/vision.fp32.safetensors"; }

TEST(Mrope, WithoutImagesEveryStreamIsTheIndex) {
  const RopePositions p = mrope_positions(9, {});
  std::vector<int32_t> index(9);
  std::iota(index.begin(), index.end(), 0);
  EXPECT_EQ(p.time, index);
  EXPECT_EQ(p.height, index);
  EXPECT_EQ(p.width, index);
  EXPECT_EQ(p.delta, 0);
}

TEST(Mrope, TheInterleavedStreamsOfQwen35) {
  const std::vector<int64_t> section = {11, 11, 10};
  const std::vector<int32_t> stream = mrope_streams(64, section);
  ASSERT_EQ(stream.size(), 32u);
  for (size_t j = 0; j < stream.size(); ++j) {
    const int32_t want = j % 3 == 1 ? 1 : j % 3 == 2 && j < 30 ? 2 : 0;
    EXPECT_EQ(stream[j], want) << "frequency " << j;
  }
  EXPECT_EQ(std::count(stream.begin(), stream.end(), 0), 11);
  EXPECT_THROW(mrope_streams(64, std::vector<int64_t>{11, 11, 11}), Error);
  EXPECT_THROW(mrope_streams(64, std::vector<int64_t>{16, 16}), Error);
}

TEST(Mrope, RefusesRunsThatDoNotFit) {
  const std::vector<ImageRun> overlapping = {{.first = 2, .t = 1, .h = 4, .w = 4},
                                             {.first = 4, .t = 1, .h = 2, .w = 2}};
  EXPECT_THROW(mrope_positions(20, overlapping), Error);
  const std::vector<ImageRun> outside = {{.first = 8, .t = 1, .h = 4, .w = 4}};
  EXPECT_THROW(mrope_positions(10, outside), Error);
  const std::vector<ImageRun> odd = {{.first = 0, .t = 1, .h = 3, .w = 4}};
  EXPECT_THROW(mrope_positions(10, odd), Error);
}

// The prompt's image runs from its token types (1 on <|image_pad|>) and the grids in order.
std::vector<ImageRun> runs_of(const checkpoint::SafetensorsFile& file, const std::string& label, bool swap) {
  const checkpoint::TensorView* types = file.find(label + ".mm_types");
  const checkpoint::TensorView* grids = file.find(label + ".grids");
  EXPECT_TRUE(types && grids) << label;
  if (!types || !grids) return {};
  std::vector<ImageRun> runs;
  const int32_t* type = types->data<int32_t>();
  const int64_t* grid = grids->data<int64_t>();
  for (int64_t i = 0; i < types->element_count(); ++i) {
    if (type[i] != 1 || (i > 0 && type[i - 1] == 1)) continue;  // a run's first token (runs are never adjacent)
    const size_t g = runs.size();
    ImageRun run{.first = static_cast<int32_t>(i),
                 .t = static_cast<int32_t>(grid[3 * g]),
                 .h = static_cast<int32_t>(grid[3 * g + 1]),
                 .w = static_cast<int32_t>(grid[3 * g + 2])};
    if (swap) std::swap(run.h, run.w);
    runs.push_back(run);
  }
  return runs;
}

// How many of the golden prompts' positions (and deltas) differ from mrope_positions'.
int golden_mismatches(bool swap) {
  checkpoint::SafetensorsFile file(golden_path());
  int mismatches = 0, prompts = 0;
  for (const char* label : {"one", "two", "decode"}) {
    const checkpoint::TensorView* positions = file.find(std::string(label) + ".positions");
    EXPECT_NE(positions, nullptr) << label;
    if (positions == nullptr) continue;
    ++prompts;
    const auto length = static_cast<int32_t>(positions->shape[1]);
    const RopePositions mine = mrope_positions(length, runs_of(file, label, swap));
    const int64_t* theirs = positions->data<int64_t>();
    for (int32_t i = 0; i < length; ++i)
      for (int s = 0; s < 3; ++s) {
        const std::vector<int32_t>& stream = s == 0 ? mine.time : s == 1 ? mine.height : mine.width;
        mismatches += stream[static_cast<size_t>(i)] != theirs[s * length + i];
      }
    mismatches += mine.delta != file.find(std::string(label) + ".rope_delta")->data<int64_t>()[0];
  }
  EXPECT_EQ(prompts, 3);
  return mismatches;
}

TEST(Mrope, TransformersPositionsOfPromptsWithImages) {
  if (!std::filesystem::exists(golden_path()))
    GTEST_SKIP() << golden_path() << " is not there yet (tools/make_vision_fixtures.py on the GPU machine)";
  EXPECT_EQ(golden_mismatches(false), 0);
  EXPECT_GT(golden_mismatches(true), 0) << "the control: rows and columns swapped must not match (a square grid?)";
}

}  // namespace
}  // namespace duet::model
