// VisionConfig::parse: the 9B's vision_config read as docs/vision.md lists it, transformers' defaults for the layout
// keys save_pretrained leaves out, and every refusal naming its key.
#include "model/vision_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"

namespace duet::model {
namespace {

using nlohmann::json;

json nine_b() {
  return json::parse(R"({
    "model_type": "qwen3_5", "image_token_id": 248056, "video_token_id": 248057,
    "vision_start_token_id": 248053, "vision_end_token_id": 248054,
    "text_config": {"hidden_size": 4096},
    "vision_config": {"depth": 27, "hidden_size": 1152, "num_heads": 16, "intermediate_size": 4304,
      "hidden_act": "gelu_pytorch_tanh", "patch_size": 16, "temporal_patch_size": 2, "spatial_merge_size": 2,
      "in_channels": 3, "num_position_embeddings": 2304, "out_hidden_size": 4096, "initializer_range": 0.02,
      "deepstack_visual_indexes": []}})");
}

// The message of the refusal of `config`, or "" when it parses.
std::string refusal(const json& config) {
  try {
    VisionConfig::parse(config.dump(), "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(VisionConfig, ReadsTheNineB) {
  const VisionConfig c = VisionConfig::parse(nine_b().dump(), "config.json");
  EXPECT_EQ(c.depth, 27);
  EXPECT_EQ(c.hidden_size, 1152);
  EXPECT_EQ(c.head_dim(), 72);
  EXPECT_EQ(c.intermediate_size, 4304);
  EXPECT_EQ(c.out_hidden_size, 4096);
  EXPECT_EQ(c.grid_side(), 48);
  EXPECT_EQ(c.patch_row_size(), 1536);
  EXPECT_EQ(c.merged_size(), 4608);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.image_token_id, 248056);
  EXPECT_EQ(c.vision_end_token_id, 248054);
  EXPECT_TRUE(VisionConfig::present(nine_b().dump()));
}

TEST(VisionConfig, LayoutKeysLeftOutTakeTransformersDefaults) {
  json config = nine_b();
  for (const char* key : {"hidden_act", "patch_size", "temporal_patch_size", "spatial_merge_size", "in_channels"})
    config["vision_config"].erase(key);
  config.erase("image_token_id");
  const VisionConfig c = VisionConfig::parse(config.dump(), "config.json");
  EXPECT_EQ(c.patch_size, 16);
  EXPECT_EQ(c.temporal_patch_size, 2);
  EXPECT_EQ(c.spatial_merge_size, 2);
  EXPECT_EQ(c.in_channels, 3);
  EXPECT_EQ(c.hidden_act, "gelu_pytorch_tanh");
  EXPECT_EQ(c.image_token_id, 248056);
}

TEST(VisionConfig, NewerRopeParametersAreRead) {
  json config = nine_b();
  config["vision_config"]["rope_parameters"] = {{"rope_type", "axial"}, {"rope_theta", 5000.0}};
  EXPECT_EQ(VisionConfig::parse(config.dump(), "config.json").rope_theta, 5000.0);
  config["vision_config"]["rope_parameters"]["rope_type"] = "yarn";
  EXPECT_NE(refusal(config).find("vision_config.rope_parameters.rope_type"), std::string::npos) << refusal(config);
}

TEST(VisionConfig, MissingSizesAreRefusedByName) {
  for (const char* key :
       {"depth", "hidden_size", "num_heads", "intermediate_size", "out_hidden_size", "num_position_embeddings"}) {
    json config = nine_b();
    config["vision_config"].erase(key);
    const std::string message = refusal(config);
    EXPECT_NE(message.find(std::string("missing vision_config.") + key), std::string::npos) << key << ": " << message;
  }
  json config = nine_b();
  config.erase("vision_config");
  EXPECT_NE(refusal(config).find("missing vision_config"), std::string::npos);
}

TEST(VisionConfig, InconsistentValuesAreRefusedByName) {
  struct Case {
    const char* key;
    json value;
    const char* named;
  };
  const Case cases[] = {
      {"num_heads", 7, "not a multiple of vision_config.num_heads"},
      {"num_heads", 64, "head_dim"},  // 1152 / 64 = 18: not a multiple of 4
      {"num_position_embeddings", 2300, "vision_config.num_position_embeddings = 2300 is not a square"},
      {"hidden_act", "gelu", "vision_config.hidden_act \"gelu\""},
      {"in_channels", 4, "vision_config.in_channels"},
      {"deepstack_visual_indexes", json::array({8, 16, 24}), "vision_config.deepstack_visual_indexes"},
      {"out_hidden_size", 3584, "differs from text_config.hidden_size"},
      {"depth", 0, "vision_config.depth = 0 is out of range"},
      {"patch_size", -16, "vision_config.patch_size = -16 is out of range"},
      {"hidden_size", "1152", "vision_config.hidden_size must be an integer"},
      {"rope_theta", "big", "vision_config.rope_theta must be a number"},
      {"rope_theta", 0, "vision_config.rope_theta = 0 must be positive"},
  };
  for (const Case& c : cases) {
    json config = nine_b();
    config["vision_config"][c.key] = c.value;
    const std::string message = refusal(config);
    EXPECT_NE(message.find(c.named), std::string::npos) << c.key << " = " << c.value.dump() << ": " << message;
    EXPECT_NE(message.find("config.json"), std::string::npos) << message;
  }
  json config = nine_b();
  config["video_token_id"] = 248056;
  EXPECT_NE(refusal(config).find("must differ"), std::string::npos) << refusal(config);
  config = nine_b();
  config["image_token_id"] = "x";
  EXPECT_NE(refusal(config).find("image_token_id must be"), std::string::npos) << refusal(config);
  EXPECT_NE(refusal(json::array()).find("not a JSON object"), std::string::npos);
}

}  // namespace
}  // namespace duet::model
