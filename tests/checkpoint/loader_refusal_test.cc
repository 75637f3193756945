// Checkpoint loading refuses damaged checkpoints before building anything, with a message naming the file and
// the tensor (or config field). Each case damages a fresh copy of a fixture.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "checkpoint/checkpoint.h"
#include "damaged_copies.h"
#include "model/model.h"

namespace duet::model {
namespace {

using testing::DamagedCopy;

// Loading `folder` must throw duet::Error whose message contains every one of `parts`.
void expect_refusal(const std::string& folder, const std::vector<std::string>& parts) {
  try {
    Model::load(folder);
    ADD_FAILURE() << folder << " loaded, expected a refusal mentioning " << parts[0];
  } catch (const duet::Error& e) {
    const std::string message = e.what();
    for (const auto& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message << "\n  lacks: " << part;
    std::printf("refused: %s\n", message.c_str());
  }
}

const std::string kMmTensor = "model.language_model.layers.0.mlp.gate_proj.weight";
const std::string kTextTensor = "model.layers.0.mlp.gate_proj.weight";

TEST(LoaderRefusal, FixturesLoad) {
  EXPECT_NO_THROW(Model::load(DamagedCopy("tiny-mm").folder()));
  EXPECT_NO_THROW(Model::load(DamagedCopy("tiny-text").folder()));
}

TEST(LoaderRefusal, TruncatedShard) {
  DamagedCopy copy("tiny-mm");
  const auto shard = copy.shard_of(kMmTensor);
  copy.truncate(shard, 100);
  expect_refusal(copy.folder(), {shard, "truncated"});
}

TEST(LoaderRefusal, TruncatedHeader) {
  DamagedCopy copy("tiny-text");
  copy.write_text("model.safetensors", DamagedCopy::read(copy.file("model.safetensors")).substr(0, 200));
  expect_refusal(copy.folder(), {"model.safetensors", "truncated"});
}

TEST(LoaderRefusal, OffsetsPastTheData) {
  DamagedCopy copy("tiny-text");
  copy.edit_header("model.safetensors", [](nlohmann::json& h) {
    auto& offsets = h[kTextTensor]["data_offsets"];
    offsets = {offsets[0].get<uint64_t>() + (1u << 30), offsets[1].get<uint64_t>() + (1u << 30)};
  });
  expect_refusal(copy.folder(), {"model.safetensors", kTextTensor, "past the data"});
}

TEST(LoaderRefusal, OverlappingOffsets) {
  DamagedCopy copy("tiny-text");
  copy.edit_header("model.safetensors", [](nlohmann::json& h) {
    // Point one tensor at the bytes of another of the same size.
    h["model.layers.0.mlp.up_proj.weight"]["data_offsets"] = h[kTextTensor]["data_offsets"];
  });
  expect_refusal(copy.folder(), {"model.safetensors", "overlaps", "mlp."});
}

TEST(LoaderRefusal, SizeDisagreesWithShape) {
  DamagedCopy copy("tiny-text");
  copy.edit_header("model.safetensors", [](nlohmann::json& h) { h[kTextTensor]["shape"] = {96, 65}; });
  expect_refusal(copy.folder(), {"model.safetensors", kTextTensor, "{ 96, 65 }"});
}

TEST(LoaderRefusal, UnknownDtype) {
  DamagedCopy copy("tiny-text");
  copy.edit_header("model.safetensors", [](nlohmann::json& h) { h[kTextTensor]["dtype"] = "Q4_K"; });
  expect_refusal(copy.folder(), {"model.safetensors", kTextTensor, "unsupported dtype Q4_K"});
}

TEST(LoaderRefusal, WrongDtype) {
  DamagedCopy copy("tiny-mm");
  const auto shard = copy.shard_of(kMmTensor);
  copy.edit_header(shard, [](nlohmann::json& h) { h[kMmTensor]["dtype"] = "F16"; });
  expect_refusal(copy.folder(), {shard, kMmTensor + ": f16 { 96, 64 }, expected bf16 { 96, 64 }"});
}

TEST(LoaderRefusal, WrongShape) {
  DamagedCopy copy("tiny-mm");
  const auto shard = copy.shard_of(kMmTensor);
  copy.edit_header(shard, [](nlohmann::json& h) { h[kMmTensor]["shape"] = {64, 96}; });
  expect_refusal(copy.folder(), {shard, kMmTensor + ": bf16 { 64, 96 }, expected bf16 { 96, 64 }"});
}

TEST(LoaderRefusal, MissingTensor) {
  DamagedCopy copy("tiny-text");
  const std::string name = "model.layers.4.self_attn.k_norm.weight";
  copy.edit_header("model.safetensors", [&](nlohmann::json& h) {
    h["model.layers.4.self_attn.k_norm.renamed"] = h[name];
    h.erase(name);
  });
  expect_refusal(copy.folder(), {"model.safetensors", "missing tensor " + name});
}

TEST(LoaderRefusal, MissingLmHeadWhenUntied) {
  DamagedCopy copy("tiny-text");
  copy.edit_json("config.json", [](nlohmann::json& c) { c["tie_word_embeddings"] = false; });
  expect_refusal(copy.folder(), {"model.safetensors", "missing tensor lm_head.weight"});
}

TEST(LoaderRefusal, F32WhereBf16IsRequired) {
  // Only A_log and linear_attn.norm.weight may be F32; a matrix stored F32 is refused (no silent cast).
  DamagedCopy copy("tiny-mm");
  const std::string a_log = "model.language_model.layers.0.linear_attn.A_log";
  const std::string dt_bias = "model.language_model.layers.0.linear_attn.dt_bias";
  const auto shard = copy.shard_of(dt_bias);
  ASSERT_EQ(shard, copy.shard_of(a_log));
  copy.edit_header(shard, [&](nlohmann::json& h) {
    // Swap the two entries: A_log becomes BF16 (allowed), dt_bias F32 (not).
    std::swap(h[dt_bias], h[a_log]);
  });
  expect_refusal(copy.folder(), {shard, dt_bias + ": f32 { 4 }, expected bf16 { 4 }"});
}

TEST(LoaderRefusal, IndexNotJson) {
  DamagedCopy copy("tiny-mm");
  copy.write_text("model.safetensors.index.json", "{\"weight_map\": ");
  expect_refusal(copy.folder(), {"model.safetensors.index.json", "not valid JSON"});
}

TEST(LoaderRefusal, IndexNamesMissingShard) {
  DamagedCopy copy("tiny-mm");
  copy.edit_json("model.safetensors.index.json",
                 [](nlohmann::json& i) { i["weight_map"][kMmTensor] = "model-00009-of-00005.safetensors"; });
  expect_refusal(copy.folder(), {"model.safetensors.index.json", "model-00009-of-00005.safetensors"});
}

TEST(LoaderRefusal, IndexDisagreesWithShard) {
  DamagedCopy copy("tiny-mm");
  std::string other;
  copy.edit_json("model.safetensors.index.json", [&](nlohmann::json& i) {
    const std::string here = i["weight_map"][kMmTensor];
    for (const auto& [name, shard] : i["weight_map"].items())
      if (shard != here) other = shard;
    i["weight_map"][kMmTensor] = other;
  });
  expect_refusal(copy.folder(), {other, kMmTensor, "not there"});
}

TEST(LoaderRefusal, IndexEscapesTheFolder) {
  DamagedCopy copy("tiny-mm");
  copy.edit_json("model.safetensors.index.json",
                 [](nlohmann::json& i) { i["weight_map"][kMmTensor] = "../elsewhere.safetensors"; });
  expect_refusal(copy.folder(), {"model.safetensors.index.json", "not a file name in the folder"});
}

TEST(LoaderRefusal, NoWeights) {
  DamagedCopy copy("tiny-text");
  std::filesystem::remove(copy.file("model.safetensors"));
  expect_refusal(copy.folder(), {copy.folder(), "no model.safetensors"});
}

// Config fields out of range, each named.
struct ConfigCase {
  const char* label;
  std::function<void(nlohmann::json&)> edit;
  std::string expected;
};

TEST(LoaderRefusal, ConfigOutOfRange) {
  const std::vector<ConfigCase> cases = {
      {"kv heads", [](auto& c) { c["num_key_value_heads"] = 3; }, "num_attention_heads = 4 is not a multiple"},
      {"gdn heads", [](auto& c) { c["linear_num_key_heads"] = 3; }, "linear_num_value_heads = 4 is not a multiple"},
      {"zero hidden", [](auto& c) { c["hidden_size"] = 0; }, "hidden_size = 0 is out of range"},
      {"negative vocab", [](auto& c) { c["vocab_size"] = -5; }, "vocab_size = -5 is out of range"},
      {"layer count", [](auto& c) { c["num_hidden_layers"] = 5; }, "layer_types has 6 entries, num_hidden_layers is 5"},
      {"layer type", [](auto& c) { c["layer_types"][2] = "sliding_attention"; },
       "layer_types[2] = \"sliding_attention\""},
      {"rope type", [](auto& c) { c["rope_parameters"]["rope_type"] = "yarn"; },
       "rope type \"yarn\" (rope_parameters.rope_type) is not supported"},
      {"rope scaling",
       [](auto& c) {
         c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
       },
       "rope type \"linear\" (rope_scaling.type) is not supported"},
      {"rotary", [](auto& c) { c["rope_parameters"]["partial_rotary_factor"] = 0.01; }, "rotary dims"},
      {"eps", [](auto& c) { c["rms_norm_eps"] = 0; }, "rms_norm_eps = 0 must be positive"},
      {"activation", [](auto& c) { c["hidden_act"] = "gelu"; }, "hidden_act \"gelu\" is not supported"},
      {"model type", [](auto& c) { c["model_type"] = "llama"; }, "model_type \"llama\" is not supported"},
      {"not integer", [](auto& c) { c["head_dim"] = "32"; }, "head_dim must be an integer"},
      {"missing", [](auto& c) { c.erase("hidden_size"); }, "missing hidden_size"},
  };
  for (const auto& test_case : cases) {
    SCOPED_TRACE(test_case.label);
    DamagedCopy copy("tiny-text");
    copy.edit_json("config.json", test_case.edit);
    expect_refusal(copy.folder(), {"config.json", test_case.expected});
  }
}

TEST(LoaderRefusal, NestedConfigFieldsAreNamedWithTheirPath) {
  DamagedCopy copy("tiny-mm");
  copy.edit_json("config.json", [](nlohmann::json& c) { c["text_config"]["head_dim"] = 2.5; });
  expect_refusal(copy.folder(), {"config.json", "text_config.head_dim must be an integer"});
}

TEST(LoaderRefusal, TensorsTheConfigDoesNotUse) {
  // Fewer layers configured than stored: the extra layer's tensors are refused by name, not silently skipped.
  DamagedCopy copy("tiny-text");
  copy.edit_json("config.json", [](nlohmann::json& c) {
    c["num_hidden_layers"] = 5;
    c["layer_types"].erase(5);
  });
  expect_refusal(copy.folder(), {"model.safetensors", "model.layers.5.", "not used by this config"});
}

TEST(LoaderRefusal, ShapeFollowsTheConfig) {
  // A config that disagrees with the stored tensors is refused at the first tensor that does not fit.
  DamagedCopy copy("tiny-text");
  copy.edit_json("config.json", [](nlohmann::json& c) { c["intermediate_size"] = 128; });
  expect_refusal(copy.folder(), {"model.safetensors", kTextTensor, "expected bf16 { 128, 64 }"});
}

}  // namespace
}  // namespace duet::model
