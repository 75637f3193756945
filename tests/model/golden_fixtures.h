#pragma once
// Test helpers: the tiny Qwen3.5 fixtures and transformers goldens under tests/fixtures, and the error measure the
// golden tests use.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "../tests_dir.h"
#include "checkpoint/checkpoint.h"

namespace duet::testing {

inline std::string fixture_path(const std::string& relative) {
  return (std::filesystem::path(tests_dir()) / "fixtures" / relative).string();
}
inline std::string model_fixture(const std::string& name) { return fixture_path("models/" + name); }
// A model with goldens: the fixtures under tests/fixtures/models, or "demo", the bundled (trained) demo model, which
// lives in models/demo because `duet` serves it by default.
inline std::string golden_model(const std::string& name) {
  if (name == "demo") return (std::filesystem::path(tests_dir()) / ".." / "models" / "demo").string();
  return model_fixture(name);
}
inline std::string golden_fixture(const std::string& name, const std::string& dtype) {
  return fixture_path("goldens/" + name + "." + dtype + ".safetensors");
}

// Golden tensors by name, as vectors (F32 or I32).
class Goldens {
 public:
  explicit Goldens(const std::string& path) : file_(checkpoint::Checkpoint::open_file(path)) {}
  std::vector<float> f32(const std::string& name) const {
    const auto& t = file_.require(name, {checkpoint::DType::f32}, shape(name));
    return {t.data<float>(), t.data<float>() + t.element_count()};
  }
  std::vector<int32_t> i32(const std::string& name) const {
    const auto& t = file_.require(name, {checkpoint::DType::i32}, shape(name));
    return {t.data<int32_t>(), t.data<int32_t>() + t.element_count()};
  }
  std::vector<int64_t> shape(const std::string& name) const {
    const auto* t = file_.find(name);
    if (t == nullptr) throw std::runtime_error(file_.source() + ": no tensor " + name);
    return t->shape;
  }

 private:
  checkpoint::Checkpoint file_;
};

// The relative error of a tensor: max |got - want| / max |want| over the whole tensor. (Elementwise relative error
// is meaningless for entries near zero; scaling by the tensor's largest magnitude is the usual gate.)
inline double relative_error(std::span<const float> got, std::span<const float> want) {
  if (got.size() != want.size()) return INFINITY;
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(d <= max_diff)) max_diff = d;  // NaN propagates as the max
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(want[i])));
  }
  return max_diff / std::max(max_ref, 1e-30);
}

}  // namespace duet::testing
