// The processor's pixels as transformers computed them on the GPU machine (tools/make_vision_fixtures.py, copied to
// tests/fixtures/goldens/vision.fp32.safetensors and tests/fixtures/vision/images): decoding, smart_resize, the
// resize and the patch rows, each exactly. Skipped, saying so, until those fixtures are committed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>

#include "../tests_dir.h"
#include "checkpoint/safetensors.h"
#include "fixtures.h"
#include "image/decode.h"
#include "image/patches.h"
#include "image/resize.h"
#include "image/smart_resize.h"

namespace duet::image {
namespace {

std::string golden_path() { return duet::testing::tests_dir() + "/fixtures/goldens/vision.fp32.safetensors"; }

class TransformersGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(golden_path()))
      GTEST_SKIP() << golden_path() << " is not there yet (tools/make_vision_fixtures.py on the GPU machine)";
    file_ = std::make_unique<checkpoint::SafetensorsFile>(golden_path());
    for (const auto& tensor : file_->tensors())
      if (tensor.name.starts_with("img.") && tensor.name.ends_with(".rgb"))
        names_.push_back(tensor.name.substr(4, tensor.name.size() - 8));
    ASSERT_FALSE(names_.empty());
  }

  // An RGB image from a (h, w, 3) u8 tensor.
  Image image(const std::string& key) const {
    const checkpoint::TensorView* t = file_->find(key);
    EXPECT_NE(t, nullptr) << key;
    if (t == nullptr) return {};
    EXPECT_EQ(t->dtype, checkpoint::DType::u8) << key;
    EXPECT_EQ(t->shape.size(), 3u) << key;
    Image out;
    out.height = static_cast<uint32_t>(t->shape[0]);
    out.width = static_cast<uint32_t>(t->shape[1]);
    out.rgb.assign(t->bytes.begin(), t->bytes.end());
    return out;
  }

  std::vector<int64_t> grid(const std::string& key) const {
    const checkpoint::TensorView* t = file_->find(key);
    EXPECT_NE(t, nullptr) << key;
    if (t == nullptr) return {};
    return {t->data<int64_t>(), t->data<int64_t>() + t->element_count()};
  }

  std::unique_ptr<checkpoint::SafetensorsFile> file_;
  std::vector<std::string> names_;
};

TEST_F(TransformersGolden, DecodedPixelsArePillows) {
  for (const std::string& name : names_) {
    std::string path;
    for (const char* ext : {".png", ".jpg", ".webp", ".gif"})
      if (std::filesystem::exists(duet::testing::tests_dir() + "/fixtures/vision/images/" + name + ext))
        path = duet::testing::tests_dir() + "/fixtures/vision/images/" + name + ext;
    ASSERT_FALSE(path.empty()) << name << ": its encoded file is missing";
    const Image mine = decode(testing::read_bytes(path));
    const Image theirs = image("img." + name + ".rgb");
    EXPECT_EQ(mine.width, theirs.width) << name;
    EXPECT_EQ(mine.height, theirs.height) << name;
    EXPECT_TRUE(mine.rgb == theirs.rgb) << name << ": decoded pixels differ from the GPU machine's Pillow";
  }
}

TEST_F(TransformersGolden, GridResizeAndPatchesAreTheProcessors) {
  struct Setting {
    const char* label;
    uint64_t min_pixels, max_pixels;
  };
  for (const Setting& s : {Setting{"stock", 65536, 16777216}, Setting{"bounded", 4096, 16384}}) {
    for (const std::string& name : names_) {
      const Image source = image("img." + name + ".rgb");
      const std::vector<int64_t> thw = grid("img." + name + "." + s.label + ".grid");
      ASSERT_EQ(thw.size(), 3u);
      const Size size = smart_resize(source.height, source.width, 32, s.min_pixels, s.max_pixels);
      EXPECT_EQ(thw[0], 1) << name;
      EXPECT_EQ(int64_t{size.height}, thw[1] * 16) << name << " " << s.label;
      EXPECT_EQ(int64_t{size.width}, thw[2] * 16) << name << " " << s.label;
      const Image resized = resize_bicubic(source, size.width, size.height);
      const Image expected = image("img." + name + "." + s.label + ".resized");
      size_t differing = 0;
      for (size_t i = 0; i < std::min(resized.rgb.size(), expected.rgb.size()); ++i)
        differing += resized.rgb[i] != expected.rgb[i];
      EXPECT_EQ(resized.rgb.size(), expected.rgb.size()) << name;
      EXPECT_EQ(differing, 0u) << name << " " << s.label << ": resized values that differ from transformers'";
    }
  }
  for (const auto& tensor : file_->tensors()) {
    if (!tensor.name.starts_with("pixel_values.")) continue;
    const std::string name = tensor.name.substr(13);
    const Patches patches = to_patches(image("img." + name + ".stock.resized"));
    ASSERT_EQ(int64_t(patches.values.size()), tensor.element_count()) << name;
    EXPECT_EQ(std::memcmp(patches.values.data(), tensor.bytes.data(), tensor.bytes.size()), 0)
        << name << ": pixel_values differ from transformers'";
  }
}

}  // namespace
}  // namespace duet::image
