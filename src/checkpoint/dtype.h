#pragma once
// Element types a safetensors file may declare. We know the size of every type the format defines (so a header's
// offsets can be checked for any tensor), but the model accepts only a few of them; the rest are refused by name.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace duet::checkpoint {

enum class DType : uint8_t { bool8, u8, i8, i16, u16, i32, u32, i64, u64, f8_e4m3, f8_e5m2, f16, bf16, f32, f64 };

// Lowercase name for messages ("bf16", "f32").
std::string_view dtype_name(DType dtype);
size_t dtype_size(DType dtype);
// From the safetensors spelling ("BF16", "F32", ...); nullopt for a string the format does not define.
std::optional<DType> dtype_from_safetensors(std::string_view text);
std::string_view dtype_safetensors_name(DType dtype);

// "{ 8192, 64 }", the shape spelling of our messages.
std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace duet::checkpoint
