#include "backend/cpu/adapted_projection.h"

#include <cstring>
#include <vector>

#include "backend/cpu/matmul.h"
#include "base/error.h"

namespace duet::backend::cpu {

void project(const float* x, int64_t rows, const Weight& w, const LoraFactors& lora, std::span<const StepPiece> pieces,
             float* y) {
  matmul(x, rows, w, y);
  if (!lora.present()) return;
  const int64_t in = w.cols, out = w.rows, rank = lora.A.rows;
  if (lora.A.cols != in || lora.B.rows != out || lora.B.cols != rank)
    fail("cpu backend: adapter factors A [{}, {}] B [{}, {}] do not fit a [{}, {}] projection", lora.A.rows,
         lora.A.cols, lora.B.rows, lora.B.cols, out, in);
  std::vector<int64_t> adapted_rows;
  for (const StepPiece& piece : pieces)
    if (piece.adapted)
      for (int64_t t = 0; t < piece.rows; ++t) adapted_rows.push_back(piece.first_row + t);
  if (adapted_rows.empty()) return;

  const auto n = static_cast<int64_t>(adapted_rows.size());
  std::vector<float> gathered(static_cast<size_t>(n * in));  // [n, in] the adapted rows of x
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(gathered.data() + i * in, x + adapted_rows[i] * in, sizeof(float) * static_cast<size_t>(in));
  std::vector<float> low(static_cast<size_t>(n * rank));  // [n, rank] = x A^T
  matmul(gathered.data(), n, lora.A, low.data());
  std::vector<float> delta(static_cast<size_t>(n * out));  // [n, out] = (x A^T) B^T
  matmul(low.data(), n, lora.B, delta.data());
  for (int64_t i = 0; i < n; ++i) {
    float* row = y + adapted_rows[i] * out;
    for (int64_t j = 0; j < out; ++j) row[j] += delta[i * out + j];
  }
}

}  // namespace duet::backend::cpu
