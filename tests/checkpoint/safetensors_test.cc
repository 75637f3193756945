// safetensors reading on small synthetic files: round trip through the writer, every dtype's size, and refusals
// of headers that lie.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors_writer.h"

namespace duet::checkpoint {
namespace {

namespace fs = std::filesystem;

std::string temp_file(const std::string& name) { return (fs::temp_directory_path() / ("duet_st_" + name)).string(); }

// Writes a file with this header (padded to 8 bytes, so data starts aligned) and zeroed data.
void write_raw(const std::string& path, std::string header, size_t data_bytes) {
  while (header.size() % 8 != 0) header.push_back(' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  out += header + std::string(data_bytes, '\0');
  std::ofstream(path, std::ios::binary) << out;
}

std::string refusal(const std::string& path) {
  try {
    SafetensorsFile file(path);
  } catch (const duet::Error& e) {
    return e.what();
  }
  return "(no refusal)";
}

TEST(Safetensors, RoundTripsThroughTheWriter) {
  const std::vector<float> f32{1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  const std::vector<int32_t> i32{1, -2, 3};
  const std::vector<uint16_t> bf16{0x3f80, 0xc000, 0x4040};
  const std::vector<TensorToWrite> tensors{{"a.f32", DType::f32, {2, 3}, as_bytes_of(f32)},
                                           {"b.i32", DType::i32, {3}, as_bytes_of(i32)},
                                           {"c.bf16", DType::bf16, {3, 1}, as_bytes_of(bf16)}};
  const auto path = temp_file("roundtrip.safetensors");
  write_safetensors(path, tensors, {{"format", "pt"}});
  const auto checkpoint = Checkpoint::open_file(path);
  const auto& a = checkpoint.require("a.f32", {DType::f32}, {2, 3});
  EXPECT_EQ(std::vector<float>(a.data<float>(), a.data<float>() + 6), f32);
  const auto& b = checkpoint.require("b.i32", {DType::i32}, {3});
  EXPECT_EQ(std::vector<int32_t>(b.data<int32_t>(), b.data<int32_t>() + 3), i32);
  const auto& c = checkpoint.require("c.bf16", {DType::bf16, DType::f32}, {3, 1});
  EXPECT_EQ(c.data<uint16_t>()[1], 0xc000);
  EXPECT_EQ(checkpoint.names().size(), 3u);
  fs::remove(path);
}

TEST(Safetensors, RequireNamesFileTensorDtypeAndShape) {
  const std::vector<float> values(4, 1.0f);
  const std::vector<TensorToWrite> tensors{{"w", DType::f32, {4}, as_bytes_of(values)}};
  const auto path = temp_file("require.safetensors");
  write_safetensors(path, tensors);
  const auto checkpoint = Checkpoint::open_file(path);
  try {
    checkpoint.require("w", {DType::bf16}, {4});
    ADD_FAILURE();
  } catch (const duet::Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": w: f32 { 4 }, expected bf16 { 4 }");
  }
  EXPECT_THROW(checkpoint.require("w", {DType::f32}, {2, 2}), duet::Error);
  try {
    checkpoint.require("absent", {DType::f32}, {4});
    ADD_FAILURE();
  } catch (const duet::Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": missing tensor absent");
  }
  fs::remove(path);
}

TEST(Safetensors, RefusesLyingHeaders) {
  const auto path = temp_file("lying.safetensors");
  write_raw(path, R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4);
  EXPECT_NE(refusal(path).find("past the data section"), std::string::npos) << refusal(path);
  write_raw(path, R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 16);
  EXPECT_NE(refusal(path).find("needs 12 bytes"), std::string::npos) << refusal(path);
  write_raw(path, R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 16);
  EXPECT_NE(refusal(path).find("backwards"), std::string::npos) << refusal(path);
  write_raw(
      path,
      R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"u":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      16);
  EXPECT_NE(refusal(path).find("overlaps"), std::string::npos) << refusal(path);
  write_raw(path, R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 16);
  EXPECT_NE(refusal(path).find("non-negative"), std::string::npos) << refusal(path);
  write_raw(path, R"({"t":{"dtype":"BF16","shape":[2],"data_offsets":[1,5]}})", 16);
  EXPECT_NE(refusal(path).find("not aligned"), std::string::npos) << refusal(path);
  write_raw(path, R"({"t":)", 0);
  EXPECT_NE(refusal(path).find("not valid JSON"), std::string::npos) << refusal(path);
  std::ofstream(path, std::ios::binary) << std::string("\x10\x00\x00", 3);
  EXPECT_NE(refusal(path).find("truncated"), std::string::npos) << refusal(path);
  std::ofstream(path, std::ios::binary) << std::string("\xff\x00\x00\x00\x00\x00\x00\x00{}", 10);
  EXPECT_NE(refusal(path).find("truncated"), std::string::npos) << refusal(path);
  fs::remove(path);
}

TEST(Safetensors, EmptyTensorsAndMetadataAreFine) {
  const auto path = temp_file("empty.safetensors");
  write_raw(path, R"({"__metadata__":{"format":"pt"},"e":{"dtype":"F64","shape":[0,3],"data_offsets":[0,0]}})", 0);
  SafetensorsFile file(path);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  ASSERT_NE(file.find("e"), nullptr);
  EXPECT_EQ(file.find("e")->dtype, DType::f64);
  fs::remove(path);
}

}  // namespace
}  // namespace duet::checkpoint
