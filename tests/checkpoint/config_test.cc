// Qwen35Config from config.json: both layouts (nested qwen3_5 and top-level qwen3_5_text), RoPE settings in any of
// the places transformers has kept them, and transformers' defaults for absent fields.
#include <gtest/gtest.h>

#include <filesystem>

#include "../tests_dir.h"
#include "base/error.h"
#include "model/qwen35_config.h"

namespace duet::model {
namespace {

std::string fixture_config(const std::string& name) {
  return (std::filesystem::path(::duet::testing::tests_dir()) / "fixtures" / "models" / name / "config.json").string();
}

TEST(Qwen35Config, ReadsTheNestedMultimodalConfig) {
  const auto c = Qwen35Config::load(fixture_config("tiny-mm"));
  EXPECT_EQ(c.model_type, "qwen3_5");
  EXPECT_TRUE(c.nested);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 96);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.rotary_dim(), 8);
  EXPECT_EQ(c.linear_num_key_heads, 2);
  EXPECT_EQ(c.linear_num_value_heads, 4);
  EXPECT_EQ(c.gdn_conv_dim(), 2 * 2 * 16 + 4 * 32);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.layer_types, (std::vector<LayerType>{LayerType::linear_attention, LayerType::linear_attention,
                                                   LayerType::linear_attention, LayerType::full_attention}));
  EXPECT_EQ(c.mrope_section, (std::vector<int64_t>{2, 1, 1}));
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
}

TEST(Qwen35Config, ReadsTheTopLevelTextConfig) {
  const auto c = Qwen35Config::load(fixture_config("tiny-text"));
  EXPECT_EQ(c.model_type, "qwen3_5_text");
  EXPECT_FALSE(c.nested);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.num_hidden_layers, 6);
  EXPECT_EQ(c.layer_count(LayerType::full_attention), 2);
  EXPECT_EQ(c.layer_types[1], LayerType::full_attention);
  EXPECT_EQ(c.layer_types[4], LayerType::full_attention);
}

const char* kMinimal = R"({"model_type": "qwen3_5_text", "vocab_size": 100, "hidden_size": 8,
  "intermediate_size": 16, "num_hidden_layers": 8, "num_attention_heads": 2, "num_key_value_heads": 1 %s})";

Qwen35Config parse_with(const std::string& extra) {
  char text[1024];
  std::snprintf(text, sizeof text, kMinimal, extra.c_str());
  return Qwen35Config::parse(text, "config.json");
}

TEST(Qwen35Config, DefaultsFollowTransformers) {
  const auto c = parse_with("");
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.linear_num_key_heads, 16);
  EXPECT_EQ(c.linear_num_value_heads, 32);
  EXPECT_EQ(c.linear_conv_kernel_dim, 4);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.25);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  // Every fourth layer is full attention.
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(c.layer_types[i], i % 4 == 3 ? LayerType::full_attention : LayerType::linear_attention) << i;
}

TEST(Qwen35Config, RopeSettingsFromAnyPlace) {
  EXPECT_DOUBLE_EQ(parse_with(R"(, "rope_theta": 1e7)").rope_theta, 1e7);
  EXPECT_DOUBLE_EQ(parse_with(R"(, "rope_parameters": {"rope_theta": 5e6, "rope_type": "default"})").rope_theta, 5e6);
  EXPECT_DOUBLE_EQ(parse_with(R"(, "rope_scaling": {"type": "mrope", "mrope_section": [11, 11, 10]},
      "rope_theta": 2e6)")
                       .rope_theta,
                   2e6);
  EXPECT_EQ(parse_with(R"(, "rope_scaling": {"type": "mrope", "mrope_section": [11, 11, 10]})").mrope_section.size(),
            3u);
  EXPECT_DOUBLE_EQ(parse_with(R"(, "partial_rotary_factor": 0.5)").partial_rotary_factor, 0.5);
  EXPECT_THROW(parse_with(R"(, "rope_parameters": {"rope_type": "dynamic"})"), duet::Error);
  EXPECT_THROW(parse_with(R"(, "rope_parameters": [1])"), duet::Error);
}

TEST(Qwen35Config, EosIdsAsNumberOrList) {
  EXPECT_EQ(parse_with(R"(, "eos_token_id": 7)").eos_token_ids, (std::vector<int64_t>{7}));
  EXPECT_EQ(parse_with(R"(, "eos_token_id": [7, 9])").eos_token_ids, (std::vector<int64_t>{7, 9}));
  EXPECT_THROW(parse_with(R"(, "eos_token_id": 100)"), duet::Error);
}

TEST(Qwen35Config, RefusesNonsense) {
  EXPECT_THROW(Qwen35Config::parse("[]", "config.json"), duet::Error);
  EXPECT_THROW(Qwen35Config::parse("{", "config.json"), duet::Error);
  EXPECT_THROW(Qwen35Config::parse(R"({"model_type": "qwen3_5"})", "config.json"), duet::Error);
  EXPECT_THROW(Qwen35Config::load("/nonexistent/config.json"), duet::Error);
}

}  // namespace
}  // namespace duet::model
