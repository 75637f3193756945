// The demo model (models/demo) in the stock multimodal layout with a small random vision tower (issue 21 item 5,
// tools/add_demo_vision_tower.py): its config.json reads as the language model it always was plus a tower, the tower
// binds by name and reads a fixture PNG through the demo's own processor settings into rows of the language model's
// width, of about a token embedding's size.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../tests_dir.h"
#include "checkpoint/checkpoint.h"
#include "image/decode.h"
#include "image/patches.h"
#include "image/processor_config.h"
#include "image/resize.h"
#include "image/smart_resize.h"
#include "model/qwen35_config.h"
#include "model/vision_model.h"

namespace duet::model {
namespace {

// The mean square of BF16 values, as float.
double rms_of_bf16(const checkpoint::TensorView& t) {
  const auto* v = t.data<uint16_t>();
  double sum = 0;
  for (int64_t i = 0; i < t.element_count(); ++i) {
    const uint32_t bits = static_cast<uint32_t>(v[i]) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    sum += static_cast<double>(f) * f;
  }
  return std::sqrt(sum / static_cast<double>(t.element_count()));
}

TEST(DemoVision, ConfigIsTheLanguageModelPlusATower) {
  if (!std::filesystem::exists(::duet::testing::demo_model_dir() + "/config.json")) FAIL() << "models/demo is missing";
  const Qwen35Config c = Qwen35Config::load(::duet::testing::demo_model_dir() + "/config.json");
  EXPECT_EQ(c.model_type, "qwen3_5");
  EXPECT_TRUE(c.nested);
  EXPECT_TRUE(c.has_vision_tower);
  EXPECT_EQ(c.image_token_id, 6012);
  // The language model's values as they were in the text-only config.
  EXPECT_EQ(c.vocab_size, 6080);
  EXPECT_EQ(c.hidden_size, 128);
  EXPECT_EQ(c.intermediate_size, 384);
  EXPECT_EQ(c.num_hidden_layers, 8);
  EXPECT_EQ(c.layer_count(LayerType::full_attention), 2);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.max_position_embeddings, 65536);
  EXPECT_EQ(c.mrope_section, (std::vector<int64_t>{2, 1, 1}));
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.mtp_num_hidden_layers, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{6002}));
  EXPECT_EQ(c.pad_token_id, 6000);
}

TEST(DemoVision, TheTowerLoadsAndReadsAPng) {
  if (!std::filesystem::exists(::duet::testing::demo_model_dir() + "/config.json")) FAIL() << "models/demo is missing";
  const auto tower = VisionModel::load(::duet::testing::demo_model_dir(), 128);
  const VisionConfig& v = tower->config();
  EXPECT_EQ(v.depth, 2);
  EXPECT_EQ(v.hidden_size, 32);
  EXPECT_EQ(v.num_heads, 2);
  EXPECT_EQ(v.intermediate_size, 64);
  EXPECT_EQ(v.out_hidden_size, 128);
  EXPECT_EQ(v.grid_side(), 8);
  EXPECT_EQ(v.patch_size, 16);
  EXPECT_EQ(v.temporal_patch_size, 2);
  EXPECT_EQ(v.spatial_merge_size, 2);
  EXPECT_EQ(v.image_token_id, 6012);
  EXPECT_EQ(v.video_token_id, 6013);
  EXPECT_EQ(v.vision_start_token_id, 6009);
  EXPECT_EQ(v.vision_end_token_id, 6010);
  EXPECT_EQ(tower->weight_bytes(), 202816u);  // 33 BF16 tensors (tools/add_demo_vision_tower.py prints it)

  // The stock layout: the language model under model.language_model., lm_head and mtp.* beside it, BF16 tower.
  const auto checkpoint = checkpoint::Checkpoint::open(::duet::testing::demo_model_dir());
  EXPECT_NE(checkpoint.find("model.language_model.embed_tokens.weight"), nullptr);
  EXPECT_EQ(checkpoint.find("model.embed_tokens.weight"), nullptr);
  EXPECT_NE(checkpoint.find("lm_head.weight"), nullptr);
  EXPECT_NE(checkpoint.find("mtp.fc.weight"), nullptr);
  size_t visual = 0;
  for (const std::string& name : checkpoint.names())
    if (name.starts_with("model.visual.")) {
      ++visual;
      EXPECT_EQ(checkpoint.find(name)->dtype, checkpoint::DType::bf16) << name;
    }
  EXPECT_EQ(visual, 33u);

  // The demo's processor: 64 x 64 to 256 x 256 pixels, the tower's patch layout.
  const auto processor = image::ProcessorConfig::load(::duet::testing::demo_model_dir() + "/preprocessor_config.json");
  EXPECT_EQ(processor.min_pixels, 64u * 64u);
  EXPECT_EQ(processor.max_pixels, 256u * 256u);
  EXPECT_EQ(processor.layout.patch, 16u);
  EXPECT_EQ(processor.layout.temporal, 2u);
  EXPECT_EQ(processor.layout.merge, 2u);

  // alpha_png (160 x 120) becomes 128 x 160 pixels, 8 x 10 patches, 20 image tokens of width 128.
  std::ifstream in(::duet::testing::tests_dir() + "/fixtures/vision/images/alpha_png.png", std::ios::binary);
  const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const image::Image decoded = image::decode(bytes);
  const image::Size size = image::smart_resize(decoded.height, decoded.width, processor.factor(), processor.min_pixels,
                                               processor.max_pixels);
  EXPECT_EQ(size.height, 128u);
  EXPECT_EQ(size.width, 160u);
  const image::Patches patches =
      image::to_patches(image::resize_bicubic(decoded, size.width, size.height), processor.layout);
  const VisionGrid grid{.t = patches.grid_t, .h = patches.grid_h, .w = patches.grid_w};
  const std::vector<float> rows = tower->rows(patches.values, grid);
  ASSERT_EQ(rows.size(), 20u * 128u);
  double sum = 0;
  for (float x : rows) {
    ASSERT_TRUE(std::isfinite(x));
    sum += static_cast<double>(x) * x;
  }
  // About the size of the demo's token embeddings (RMS 0.042), not ten times it.
  const double rms = std::sqrt(sum / static_cast<double>(rows.size()));
  const double embeddings = rms_of_bf16(*checkpoint.find("model.language_model.embed_tokens.weight"));
  std::printf("image rows RMS %.4f, token embeddings RMS %.4f\n", rms, embeddings);
  EXPECT_GT(rms, embeddings / 4);
  EXPECT_LT(rms, embeddings * 4);
  // Rows differ from token to token (the image and the positions reach them).
  EXPECT_NE(std::vector<float>(rows.begin(), rows.begin() + 128),
            std::vector<float>(rows.begin() + 128, rows.begin() + 256));
}

}  // namespace
}  // namespace duet::model
