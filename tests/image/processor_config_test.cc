// image/processor_config.h: preprocessor_config.json as the Qwen2-VL processor reads it (the pixel range from `size` or
// min_pixels / max_pixels, the patch layout, mean and std), and every switch duet implements one way refused by name.
#include "image/processor_config.h"

#include <gtest/gtest.h>

#include "image/image.h"

namespace duet::image {
namespace {

std::string config_refusal(const std::string& json) {
  try {
    ProcessorConfig::parse(json, "preprocessor_config.json");
  } catch (const ImageError& e) {
    return e.what();
  }
  return {};
}

TEST(ProcessorConfig, ReadsTheStockSettings) {
  const ProcessorConfig c = ProcessorConfig::parse(
      R"({"do_resize": true, "do_rescale": true, "do_normalize": true, "do_convert_rgb": true, "resample": 3,
          "image_mean": [0.5, 0.5, 0.5], "image_std": [0.25, 0.5, 1.0], "rescale_factor": 0.00392156862745098,
          "size": {"shortest_edge": 65536, "longest_edge": 16777216}, "patch_size": 16, "temporal_patch_size": 2,
          "merge_size": 2})",
      "test");
  EXPECT_EQ(c.min_pixels, 65536u);
  EXPECT_EQ(c.max_pixels, 16777216u);
  EXPECT_EQ(c.factor(), 32u);
  EXPECT_EQ(c.layout.std[0], 0.25f);
  EXPECT_EQ(c.layout.rescale, 1.0 / 255.0);
  // min_pixels / max_pixels override size.
  const ProcessorConfig o = ProcessorConfig::parse(R"({"size": {"shortest_edge": 10}, "min_pixels": 20})", "test");
  EXPECT_EQ(o.min_pixels, 20u);
}

TEST(ProcessorConfig, RefusesWhatItDoesNotImplementByName) {
  EXPECT_NE(config_refusal(R"({"do_resize": false})").find("do_resize"), std::string::npos);
  EXPECT_NE(config_refusal(R"({"do_normalize": false})").find("do_normalize"), std::string::npos);
  EXPECT_NE(config_refusal(R"({"resample": 2})").find("resample"), std::string::npos);
  EXPECT_NE(config_refusal(R"({"image_std": [0.5, 0, 0.5]})").find("image_std"), std::string::npos);
  EXPECT_NE(config_refusal(R"({"patch_size": -16})").find("patch_size"), std::string::npos);
  EXPECT_NE(config_refusal(R"({"min_pixels": 100, "max_pixels": 10})").find("exceed"), std::string::npos);
  EXPECT_NE(config_refusal("[1, 2]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(config_refusal("{").find("not valid JSON"), std::string::npos);
}

}  // namespace
}  // namespace duet::image
