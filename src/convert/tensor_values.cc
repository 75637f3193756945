#include "convert/tensor_values.h"

#include <cstring>

#include "base/bf16.h"
#include "base/error.h"

namespace duet::convert {

std::vector<float> values_of(const checkpoint::TensorView& t) {
  const auto n = static_cast<size_t>(t.element_count());
  std::vector<float> out(n);
  if (t.dtype == checkpoint::DType::f32) {
    std::memcpy(out.data(), t.bytes.data(), n * sizeof(float));
  } else if (t.dtype == checkpoint::DType::bf16) {
    const auto* bits = t.data<uint16_t>();
    for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(bits[i]);
  } else {
    fail("{}: {}: {}, expected bf16 or f32", *t.file, t.name, checkpoint::dtype_name(t.dtype));
  }
  return out;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& values) {
  std::vector<uint16_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = float_to_bf16(values[i]);
  return out;
}

}  // namespace duet::convert
