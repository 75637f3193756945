#include "checkpoint/dtype.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>

namespace duet::checkpoint {

namespace {
struct DTypeInfo {
  DType dtype;
  std::string_view safetensors;
  std::string_view lower;
  size_t size;
};
constexpr std::array<DTypeInfo, 15> kTypes{{
    {DType::bool8, "BOOL", "bool", 1},
    {DType::u8, "U8", "u8", 1},
    {DType::i8, "I8", "i8", 1},
    {DType::i16, "I16", "i16", 2},
    {DType::u16, "U16", "u16", 2},
    {DType::i32, "I32", "i32", 4},
    {DType::u32, "U32", "u32", 4},
    {DType::i64, "I64", "i64", 8},
    {DType::u64, "U64", "u64", 8},
    {DType::f8_e4m3, "F8_E4M3", "f8_e4m3", 1},
    {DType::f8_e5m2, "F8_E5M2", "f8_e5m2", 1},
    {DType::f16, "F16", "f16", 2},
    {DType::bf16, "BF16", "bf16", 2},
    {DType::f32, "F32", "f32", 4},
    {DType::f64, "F64", "f64", 8},
}};

const DTypeInfo& info(DType dtype) {
  for (const auto& entry : kTypes)
    if (entry.dtype == dtype) return entry;
  return kTypes[0];  // unreachable: every enumerator is in the table
}
}  // namespace

std::string_view dtype_name(DType dtype) { return info(dtype).lower; }
size_t dtype_size(DType dtype) { return info(dtype).size; }
std::string_view dtype_safetensors_name(DType dtype) { return info(dtype).safetensors; }

std::optional<DType> dtype_from_safetensors(std::string_view text) {
  for (const auto& entry : kTypes)
    if (entry.safetensors == text) return entry.dtype;
  return std::nullopt;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  if (shape.empty()) return "{ }";
  return fmt::format("{{ {} }}", fmt::join(shape, ", "));
}

}  // namespace duet::checkpoint
