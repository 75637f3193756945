// `duet convert-norms` on a copy of the sharded tiny checkpoint (F32 A_log and GDN norms, like the stock releases), one
// norm planted with the values where rounding is subtle. Expected BF16 bits are written out by hand (round to nearest
// even on the dropped 16 bits, as torch's cast does), not computed by the code under test.
#include "convert/norm_conversion.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "adapter_fixtures.h"
#include "base/error.h"
#include "checkpoint/json_file.h"

namespace duet::convert {
namespace {

using testing::TempFolder;
namespace fs = std::filesystem;

const std::string kPlanted = "model.language_model.layers.0.linear_attn.norm.weight";

// F32 bits in, the BF16 bits torch's round-to-nearest-even gives.
const std::vector<std::pair<uint32_t, uint16_t>> kCases = {
    {0x3F800000, 0x3F80},  // 1.0 exactly
    {0x3F808000, 0x3F80},  // a tie: the kept part is even, stays
    {0x3F818000, 0x3F82},  // a tie: the kept part is odd, rounds up to even
    {0xBF808000, 0xBF80},  // a negative tie, even
    {0xBF818000, 0xBF82},  // a negative tie, odd
    {0x3F808001, 0x3F81},  // just above a tie
    {0x3F807FFF, 0x3F80},  // just below a tie
    {0x3F80FFFF, 0x3F81},  // carries into the next value
    {0x7F7FFFFF, 0x7F80},  // the largest float rounds to infinity
    {0x7F800000, 0x7F80},  // infinity
    {0xFF800000, 0xFF80},  // -infinity
    {0x00000000, 0x0000},  // zero
    {0x80000000, 0x8000},  // -zero
    {0x00008000, 0x0000},  // a subnormal tie, even
    {0x00018000, 0x0002},  // a subnormal tie, odd
};
const std::vector<uint32_t> kNaNs = {0x7FC00000, 0x7F800001, 0xFFC00001, 0x7FFFFFFF};  // quiet, signalling, -NaN

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// The shard holding `tensor`, per the index.
std::string shard_of(const std::string& folder, const std::string& tensor) {
  return checkpoint::read_json_file(folder + "/model.safetensors.index.json").at("weight_map").at(tensor);
}

class NormConversion : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::copy(testing::tiny_base_dir(), src_.path());
    // Plant the cases (and the NaNs) at the start of layer 0's norm, [32] F32.
    const std::string shard = src_.file(shard_of(src_.path(), kPlanted));
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<checkpoint::TensorToWrite> tensors;
    {
      const auto source = checkpoint::Checkpoint::open_file(shard);
      for (const std::string& name : source.names()) {
        const auto* t = source.find(name);
        bytes.emplace_back(t->bytes.begin(), t->bytes.end());
        if (name == kPlanted) {
          auto* values = reinterpret_cast<uint32_t*>(bytes.back().data());
          size_t i = 0;
          for (const auto& [in, out] : kCases) values[i++] = in;
          for (uint32_t nan : kNaNs) values[i++] = nan;
        }
        tensors.push_back({name, t->dtype, t->shape, {}});
      }
      for (size_t i = 0; i < tensors.size(); ++i) tensors[i].bytes = bytes[i];
      checkpoint::write_safetensors(shard + ".new", tensors, {{"format", "pt"}});
    }
    fs::rename(shard + ".new", shard);
  }

  TempFolder src_{"src"};
  TempFolder out_{"out"};
};

TEST_F(NormConversion, RoundsToNearestEvenKeepsNaNAndChangesOnlyTheNorms) {
  const NormConversionReport report = convert_norms(src_.path(), out_.path());
  EXPECT_EQ(report.converted.size(), 3u);  // three GDN layers

  const auto before = checkpoint::Checkpoint::open(src_.path());
  const auto after = checkpoint::Checkpoint::open(out_.path());
  ASSERT_EQ(before.names().size(), after.names().size());
  int norms = 0;
  for (const std::string& name : before.names()) {
    SCOPED_TRACE(name);
    const auto* b = before.find(name);
    const auto* a = after.find(name);
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->shape, b->shape);
    if (is_gdn_norm_name(name)) {
      ++norms;
      ASSERT_EQ(a->dtype, checkpoint::DType::bf16);
      const auto* bits = a->data<uint16_t>();
      const auto* original = b->data<float>();
      for (int64_t i = 0; i < b->element_count(); ++i) {  // every value: the top 16 bits, rounded, or NaN for NaN
        const uint32_t x = std::bit_cast<uint32_t>(original[i]);
        if (std::isnan(original[i])) continue;
        const uint32_t rest = x & 0xFFFF, top = x >> 16;
        const uint32_t want = rest > 0x8000 || (rest == 0x8000 && (top & 1)) ? top + 1 : top;
        EXPECT_EQ(bits[i], static_cast<uint16_t>(want)) << i;
      }
      if (name == kPlanted) {
        size_t i = 0;
        for (const auto& [in, out] : kCases) EXPECT_EQ(bits[i++], out) << std::hex << in;
        for (uint32_t nan : kNaNs) {
          const uint16_t got = bits[i++];
          EXPECT_EQ(got & 0x7F80, 0x7F80) << std::hex << nan;  // all-ones exponent
          EXPECT_NE(got & 0x007F, 0) << std::hex << nan;       // and a mantissa: a NaN, not infinity
        }
      }
    } else {
      EXPECT_EQ(a->dtype, b->dtype);
      EXPECT_TRUE(std::equal(a->bytes.begin(), a->bytes.end(), b->bytes.begin(), b->bytes.end()));
    }
  }
  EXPECT_EQ(norms, 3);
}

TEST_F(NormConversion, OtherFilesAreLinkedByteIdenticalAndTheIndexTotalIsRewritten) {
  const NormConversionReport report = convert_norms(src_.path(), out_.path());
  // The shards holding no norm, and the config and head files, are the same bytes (hard links here).
  int untouched = 0;
  for (const auto& entry : fs::directory_iterator(src_.path())) {
    const std::string name = entry.path().filename().string();
    const bool rewritten = std::find(report.rewritten.begin(), report.rewritten.end(), name) != report.rewritten.end();
    if (rewritten) continue;
    ++untouched;
    EXPECT_EQ(read_file(entry.path().string()), read_file(out_.file(name))) << name;
    EXPECT_TRUE(fs::equivalent(entry.path(), out_.file(name))) << name << " is not a hard link";
  }
  EXPECT_EQ(untouched, 6);                 // shards 4 and 5, config.json, generation_config.json, the head's two files
  EXPECT_EQ(report.rewritten.size(), 4u);  // three shards with a norm, and the index

  // total_size: less the bytes saved, which the files' own sizes show independently; the rest is unchanged.
  const auto before = checkpoint::Checkpoint::open(src_.path());
  const auto after = checkpoint::Checkpoint::open(out_.path());
  int64_t saved = 0;
  for (const std::string& name : before.names())
    saved +=
        static_cast<int64_t>(before.find(name)->bytes.size()) - static_cast<int64_t>(after.find(name)->bytes.size());
  EXPECT_EQ(saved, 3 * 32 * 2);  // three [32] norms, 2 bytes a value
  const nlohmann::json old_index = checkpoint::read_json_file(src_.file("model.safetensors.index.json"));
  const nlohmann::json new_index = checkpoint::read_json_file(out_.file("model.safetensors.index.json"));
  EXPECT_EQ(new_index.at("metadata").at("total_size").get<int64_t>(),
            old_index.at("metadata").at("total_size").get<int64_t>() - saved);
  EXPECT_EQ(new_index.at("metadata").at("total_parameters"), old_index.at("metadata").at("total_parameters"));
  EXPECT_EQ(new_index.at("weight_map"), old_index.at("weight_map"));
}

TEST_F(NormConversion, RefusesACheckpointWithoutF32NormsBeforeWriting) {
  convert_norms(src_.path(), out_.path());
  TempFolder again("again");
  try {
    convert_norms(out_.path(), again.path());
    FAIL() << "a checkpoint with BF16 norms was converted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no F32 linear_attn.norm.weight"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(again.path()));
  // An existing OUT is never written into.
  EXPECT_THROW(convert_norms(src_.path(), out_.path()), Error);
}

}  // namespace
}  // namespace duet::convert
