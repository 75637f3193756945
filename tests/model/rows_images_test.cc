// `duet rows` with prompts that carry images (src/cli/rows_images.h), the path the 9B vision gate
// (tools/gpu_vision_gate.sh) takes on the GPU, here on tiny-vl and the CPU backend: the vision goldens' prompts `one`
// and `two` (tools/make_vision_fixtures.py) given as {"ids", "images"} entries with the encoded fixture images,
// against transformers' FP32 final-norm rows within the CPU gate (1e-4 relative); the planted controls written by
// --image-controls must fail that gate; a prompt cut into chunks of 64 (cuts inside an image) gives the same bytes;
// a text entry beside them still works; a prompt whose image tokens do not fit its images is refused by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../run_command.h"
#include "cpu_gate.h"
#include "golden_fixtures.h"

namespace duet::testing {
namespace {

namespace fs = std::filesystem;

std::vector<float> read_f32(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> out(fs::exists(path) ? fs::file_size(path) / sizeof(float) : 0);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size() * sizeof(float)));
  return out;
}

class RowsImages : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(golden_fixture("vision", "fp32"))) GTEST_SKIP() << "no vision goldens";
    dir_ = fs::temp_directory_path() / ("duet_rows_images_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    goldens_ = std::make_unique<Goldens>(golden_fixture("vision", "fp32"));
  }
  void TearDown() override { fs::remove_all(dir_); }

  // An entry of the golden prompt `label` reading the fixture images `images` (relative paths: from the file's folder).
  nlohmann::json entry(const std::string& label, const std::vector<std::string>& images) {
    for (const std::string& name : images)
      fs::copy_file(fixture_path("vision/images/" + name), dir_ / name, fs::copy_options::overwrite_existing);
    return {{"ids", goldens_->i32(label + ".ids")}, {"images", images}};
  }

  CommandResult rows(const nlohmann::json& prompts, const std::string& out, const std::string& flags = "") {
    std::ofstream(dir_ / "prompts.json") << nlohmann::json{{"prompts", prompts}}.dump();
    return run_command(std::string(DUET_BINARY) + " rows " + model_fixture("tiny-vl") + " --prompts " +
                       (dir_ / "prompts.json").string() + " --out " + (dir_ / out).string() + " --backend cpu " +
                       flags + " 2>&1");
  }

  fs::path dir_;
  std::unique_ptr<Goldens> goldens_;
};

TEST_F(RowsImages, ImagePromptsMatchTransformersAndTheControlsDoNot) {
  const nlohmann::json prompts =
      nlohmann::json::array({entry("one", {"portrait_jpg.jpg"}), entry("two", {"wide_png.png", "small_png.png"}),
                             nlohmann::json(std::vector<int32_t>{5, 17, 300, 42})});
  const CommandResult result = rows(prompts, "out", "--image-controls");
  ASSERT_EQ(result.status, 0) << result.output;
  const char* labels[] = {"one", "two"};
  for (int i = 0; i < 2; ++i) {
    const std::vector<float> want = goldens_->f32(std::string(labels[i]) + ".norm_rows");
    const double error = relative_error(read_f32(dir_ / "out" / (std::to_string(i) + ".f32")), want);
    const double transposed = relative_error(read_f32(dir_ / "out" / (std::to_string(i) + ".transposed.f32")), want);
    const double flat = relative_error(read_f32(dir_ / "out" / (std::to_string(i) + ".positions1d.f32")), want);
    std::printf("%s: duet %.3g, transposed rows %.3g, 1-D positions %.3g (gate %.0e)\n", labels[i], error, transposed,
                flat, ::duet::model::kCpuGate);
    EXPECT_LT(error, ::duet::model::kCpuGate) << labels[i];
    EXPECT_GT(transposed, 10 * ::duet::model::kCpuGate) << labels[i];
    EXPECT_GT(flat, 10 * ::duet::model::kCpuGate) << labels[i];
  }
  EXPECT_EQ(read_f32(dir_ / "out" / "2.f32").size(), 4u * 64u);  // tiny-vl's width: the text entry's rows
  EXPECT_FALSE(fs::exists(dir_ / "out" / "2.transposed.f32"));   // no controls for a text prompt
  EXPECT_NE(result.output.find("image tokens"), std::string::npos) << result.output;

  // Cut into chunks of 64 (inside the images): each chunk's own positions and rows give the whole prompt's bytes.
  const CommandResult chunked = rows(prompts, "chunked", "--chunk 64");
  ASSERT_EQ(chunked.status, 0) << chunked.output;
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(read_f32(dir_ / "chunked" / (std::to_string(i) + ".f32")),
              read_f32(dir_ / "out" / (std::to_string(i) + ".f32")))
        << i;
}

TEST_F(RowsImages, ImageTokensThatDoNotFitTheImagesAreRefused) {
  // `one`'s ids hold one image's run; two images cannot fit it.
  const CommandResult two = rows(nlohmann::json::array({entry("one", {"portrait_jpg.jpg", "small_png.png"})}), "out");
  EXPECT_NE(two.status, 0);
  EXPECT_NE(two.output.find("image tokens"), std::string::npos) << two.output;
  EXPECT_NE(two.output.find("leave the prompt"), std::string::npos) << two.output;
  // The right count of images, of another size: wide_png has 88 tokens, the run 70. (small_png would pass: its 7 x 10
  // tokens are as many as portrait_jpg's 10 x 7, and ids carry only the count.)
  const CommandResult other = rows(nlohmann::json::array({entry("one", {"wide_png.png"})}), "out");
  EXPECT_NE(other.status, 0);
  EXPECT_NE(other.output.find("wide_png.png"), std::string::npos) << other.output;
  // A file that is not there, named.
  nlohmann::json missing = entry("one", {"portrait_jpg.jpg"});
  missing["images"] = nlohmann::json::array({"nowhere.png"});
  const CommandResult absent = rows(nlohmann::json::array({missing}), "out");
  EXPECT_NE(absent.status, 0);
  EXPECT_NE(absent.output.find("nowhere.png"), std::string::npos) << absent.output;
  // Images for a model without a tower.
  std::ofstream(dir_ / "prompts.json")
      << nlohmann::json{{"prompts", nlohmann::json::array({entry("one", {"portrait_jpg.jpg"})})}}.dump();
  const CommandResult text_model =
      run_command(std::string(DUET_BINARY) + " rows " + model_fixture("tiny-text") + " --prompts " +
                  (dir_ / "prompts.json").string() + " --out " + (dir_ / "out").string() + " --backend cpu 2>&1");
  EXPECT_NE(text_model.status, 0);
  EXPECT_NE(text_model.output.find("no vision tower"), std::string::npos) << text_model.output;
}

}  // namespace
}  // namespace duet::testing
