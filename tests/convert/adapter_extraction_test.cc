// `duet adapter` on the tiny fixtures (tools/make_adapter_fixtures.py): the merged checkpoint is the base plus a
// planted rank-4 difference in every projection, rounded to BF16. Extraction at rank 4 must recover the planted
// difference to the BF16 rounding floor of the merge, checked against the planted factors themselves; rank 3 (a planted
// control) must fail that gate; the randomized SVD must come within 1% of the full SVD's residual; tensors that only
// lost F32 precision are reported, not adapted; anything else that differs is refused before anything is written.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "adapter_fixtures.h"
#include "base/bf16.h"
#include "base/error.h"
#include "checkpoint/json_file.h"
#include "convert/tensor_values.h"

namespace duet::convert {
namespace {

using testing::TempFolder;
namespace fs = std::filesystem;
namespace format = checkpoint::adapter_format;

// [rows, cols] = X [rows, k] Y [k, cols], in double.
std::vector<double> product(const std::vector<float>& x, const std::vector<float>& y, int64_t rows, int64_t k,
                            int64_t cols) {
  std::vector<double> out(static_cast<size_t>(rows * cols), 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t l = 0; l < k; ++l)
      for (int64_t j = 0; j < cols; ++j) out[i * cols + j] += static_cast<double>(x[i * k + l]) * y[l * cols + j];
  return out;
}

// || B A - U V || for every module: the extracted difference against the planted one.
std::map<std::string, double> error_against_planted(const std::string& adapter_dir) {
  const auto factors = checkpoint::Checkpoint::open_file(adapter_dir + "/adapter.safetensors");
  const auto planted = checkpoint::Checkpoint::open_file(testing::planted_delta_file());
  std::map<std::string, double> errors;
  for (const std::string& name : planted.names()) {
    if (!name.ends_with(".U")) continue;
    const std::string key = name.substr(0, name.size() - 2);
    const auto* u = planted.find(key + ".U");
    const auto* v = planted.find(key + ".V");
    const auto* a = factors.find(key + ".lora_A");
    const auto* b = factors.find(key + ".lora_B");
    if (a == nullptr || b == nullptr) {
      ADD_FAILURE() << key << ": no factors extracted";
      continue;
    }
    const int64_t out = u->shape[0], in = v->shape[1];
    const auto want = product(values_of(*u), values_of(*v), out, u->shape[1], in);
    const auto got = product(values_of(*b), values_of(*a), out, a->shape[0], in);
    double sum = 0;
    for (size_t i = 0; i < want.size(); ++i) sum += (got[i] - want[i]) * (got[i] - want[i]);
    errors[key] = std::sqrt(sum);
  }
  return errors;
}

// The gate: within 2x the BF16 floor of the merge, both against the merge (the tool's own residual) and against the
// planted difference (an independent reference). 2x leaves room for the BF16 rounding of the factors themselves,
// which is of the floor's size.
constexpr double kFloorMultiple = 2.0;

TEST(AdapterExtraction, RecoversThePlantedDifferenceToTheRoundingFloor) {
  TempFolder out;
  const ExtractionReport report = testing::extract_tiny_adapter(out.path(), testing::kPlantedRank);
  ASSERT_EQ(report.modules.size(), 31u);  // 3 GDN layers x 5 + 1 attention layer x 4 + 4 MLPs x 3
  const auto errors = error_against_planted(out.path());
  ASSERT_EQ(errors.size(), 31u);
  for (const ModuleFit& m : report.modules) {
    SCOPED_TRACE(m.key);
    EXPECT_EQ(m.rank, std::min<int64_t>({testing::kPlantedRank, m.out, m.in}));
    EXPECT_GT(m.floor, 0);
    EXPECT_GT(m.difference, 50 * m.floor);  // a real difference, far above rounding
    EXPECT_LE(m.residual, kFloorMultiple * m.floor);
    EXPECT_LE(errors.at(m.key), kFloorMultiple * m.floor);
  }
}

TEST(AdapterExtraction, ControlTooLowARankFailsTheGate) {
  TempFolder out;
  const ExtractionReport report = testing::extract_tiny_adapter(out.path(), testing::kPlantedRank - 1);
  const auto errors = error_against_planted(out.path());
  ASSERT_EQ(report.modules.size(), 31u);
  // Rank 3 misses the planted difference's weakest direction. Where that direction is strong the gate fails by far;
  // a few modules' planted 4x4 core is nearly singular (a random draw), so their weakest direction hides under the
  // floor: the gate must fail on nearly all modules, never pass on the extraction as a whole.
  int failing = 0, far = 0;
  for (const ModuleFit& m : report.modules) {
    failing += m.residual > kFloorMultiple * m.floor && errors.at(m.key) > kFloorMultiple * m.floor;
    far += m.residual > 10 * kFloorMultiple * m.floor;
  }
  std::printf("rank 3 of a planted rank 4: the gate fails on %d of 31 modules (by 10x on %d)\n", failing, far);
  EXPECT_GE(failing, 28);
  EXPECT_GE(far, 20);
}

TEST(AdapterExtraction, DefaultRankIsTheFullRankOfSmallProjections) {
  TempFolder out;
  const ExtractionReport report = testing::extract_tiny_adapter(out.path());
  for (const ModuleFit& m : report.modules) {
    EXPECT_EQ(m.rank, std::min(m.out, m.in)) << m.key;
    EXPECT_FALSE(m.randomized) << m.key;  // nothing to sketch at full rank
    EXPECT_LE(m.residual, kFloorMultiple * m.floor) << m.key;
  }
}

TEST(AdapterExtraction, RandomizedSvdIsWithinOnePercentOfTheFullSvd) {
  for (int64_t rank : {4, 8, 16}) {
    SCOPED_TRACE(rank);
    TempFolder full("full"), randomized("randomized");
    const auto exact = testing::extract_tiny_adapter(full.path(), rank, SvdMethod::full).modules;
    const auto sketched = testing::extract_tiny_adapter(randomized.path(), rank, SvdMethod::randomized).modules;
    ASSERT_EQ(exact.size(), sketched.size());
    int sketched_count = 0;
    for (size_t i = 0; i < exact.size(); ++i) {
      SCOPED_TRACE(exact[i].key);
      sketched_count += sketched[i].randomized;
      EXPECT_LE(sketched[i].residual, 1.01 * exact[i].residual);
    }
    EXPECT_GT(sketched_count, 20);
  }
}

TEST(AdapterExtraction, WritesTheSpecsFolder) {
  TempFolder out;
  const ExtractionReport report = testing::extract_tiny_adapter(out.path(), testing::kPlantedRank);
  format::verify_checksums(out.path(), format::signed_files(false));
  const nlohmann::json manifest = checkpoint::read_json_file(out.file("manifest.json"));
  EXPECT_EQ(manifest.at("format"), format::kFormat);
  EXPECT_EQ(manifest.at("convention"), format::kConvention);
  EXPECT_EQ(manifest.at("modules").size(), 31u);
  EXPECT_EQ(manifest.at("modules").at("layers.0.linear_attn.in_proj_qkv").at("shape"), nlohmann::json({192, 64}));
  // A_log and the GDN norms: F32 in the base, rounded in the merge; reported, not adapted.
  ASSERT_EQ(report.rounding_only.size(), 6u);
  EXPECT_TRUE(manifest.at("not_adapted").contains("model.language_model.layers.0.linear_attn.A_log"));
  EXPECT_TRUE(manifest.at("not_adapted").contains("model.language_model.layers.2.linear_attn.norm.weight"));
  // BF16 factors; A's rows orthonormal (to BF16 precision).
  const auto factors = checkpoint::Checkpoint::open_file(out.file("adapter.safetensors"));
  const auto* a = factors.find("layers.1.mlp.down_proj.lora_A");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, checkpoint::DType::bf16);
  const std::vector<float> rows = values_of(*a);
  const int64_t r = a->shape[0], n = a->shape[1];
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < r; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < n; ++k) dot += static_cast<double>(rows[i * n + k]) * rows[j * n + k];
      EXPECT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-2) << i << "," << j;
    }
  // The head is the merged release's, byte for byte.
  for (const char* file : {"joint_head.safetensors", "joint_head_config.json"}) {
    std::ifstream x(out.file(file), std::ios::binary), y(testing::tiny_merged_dir() + "/" + file, std::ios::binary);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(x), {}), std::string(std::istreambuf_iterator<char>(y), {}))
        << file;
  }
}

TEST(AdapterExtraction, RefusesWhatNoAdapterCanCarryBeforeWriting) {
  // A merge whose embedding differs: copy the merged fixture with one embedding value changed.
  TempFolder merged("merged"), out("out");
  fs::create_directories(merged.path());
  for (const char* file : {"config.json", "joint_head.safetensors", "joint_head_config.json"})
    fs::copy_file(testing::tiny_merged_dir() + "/" + file, merged.file(file));
  {
    const auto source = checkpoint::Checkpoint::open_file(testing::tiny_merged_dir() + "/model.safetensors");
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<checkpoint::TensorToWrite> tensors;
    for (const std::string& name : source.names())
      bytes.emplace_back(source.find(name)->bytes.begin(), source.find(name)->bytes.end());
    size_t i = 0;
    for (const std::string& name : source.names()) {
      const auto* t = source.find(name);
      if (name == "model.language_model.embed_tokens.weight") bytes[i][3] ^= 0x01;
      tensors.push_back({name, t->dtype, t->shape, bytes[i++]});
    }
    checkpoint::write_safetensors(merged.file("model.safetensors"), tensors);
  }
  ExtractionOptions options{.merged_dir = merged.path(), .base_dir = testing::tiny_base_dir(), .out_dir = out.path()};
  try {
    extract_adapter(options);
    FAIL() << "a changed embedding was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.language_model.embed_tokens.weight"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(out.path()));

  // An output folder that holds something is never written into.
  fs::create_directories(out.path());
  std::ofstream(out.file("keep")) << "x";
  options.merged_dir = testing::tiny_merged_dir();
  EXPECT_THROW(extract_adapter(options), Error);
  EXPECT_EQ(std::distance(fs::directory_iterator(out.path()), {}), 1);
}

}  // namespace
}  // namespace duet::convert
