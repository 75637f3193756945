#pragma once
// transformers' log-probabilities of the six greedy tokens of tiny-vl's `decode` golden (vision.fp32.safetensors, from
// tools/make_vision_fixtures.py): each token's logit under tiny-vl's lm_head applied to transformers' own FP32
// final-norm row that predicted it (the prompt's last row, then decode.decode_rows), log-softmaxed in double. Greedy
// tokens alone are a weak check on a tiny random model (decode rows without the rope delta, 5.5e-2 off, still pick the
// same six tokens); these numbers see such an error.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "base/bf16.h"
#include "checkpoint/checkpoint.h"
#include "tests_dir.h"

namespace duet::testing {

inline std::vector<double> vision_golden_logprobs() {
  const auto goldens = checkpoint::Checkpoint::open_file(tests_dir() + "/fixtures/goldens/vision.fp32.safetensors");
  const auto model = checkpoint::Checkpoint::open(tests_dir() + "/fixtures/models/tiny-vl");
  const auto tensor = [](const checkpoint::Checkpoint& file, const std::string& name, checkpoint::DType dtype) {
    return file.require(name, {dtype}, file.find(name)->shape);
  };
  const auto& prompt_rows = tensor(goldens, "decode.norm_rows", checkpoint::DType::f32);    // [79, h]
  const auto& decode_rows = tensor(goldens, "decode.decode_rows", checkpoint::DType::f32);  // [6, h]
  const auto& fed = tensor(goldens, "decode.fed", checkpoint::DType::i32);                  // [6]
  const auto& head = tensor(model, "lm_head.weight", checkpoint::DType::bf16);              // [V, h]
  const int64_t h = head.shape[1], vocab = head.shape[0];
  std::vector<double> out;
  for (int64_t k = 0; k < fed.shape[0]; ++k) {
    const float* row =
        k == 0 ? prompt_rows.data<float>() + (prompt_rows.shape[0] - 1) * h : decode_rows.data<float>() + (k - 1) * h;
    std::vector<double> logits(static_cast<size_t>(vocab));
    double most = -INFINITY;
    for (int64_t v = 0; v < vocab; ++v) {
      double sum = 0;
      for (int64_t j = 0; j < h; ++j) sum += double{bf16_to_float(head.data<uint16_t>()[v * h + j])} * row[j];
      logits[static_cast<size_t>(v)] = sum;
      most = std::max(most, sum);
    }
    double total = 0;
    for (double logit : logits) total += std::exp(logit - most);
    out.push_back(logits[static_cast<size_t>(fed.data<int32_t>()[k])] - most - std::log(total));
  }
  return out;
}

}  // namespace duet::testing
